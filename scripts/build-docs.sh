#!/usr/bin/env bash
# Builds the KeyAuth documentation catalog (Sources/KeyAuth/KeyAuth.docc) and fails on any
# warning, so that a broken symbol link or article reference cannot reach a release:
#
#   bash scripts/build-docs.sh [OUTPUT_DIR]     (default .build/documentation)
#
# With the swift-docc-plugin available, `swift package generate-documentation` does it; without
# it (this package depends on nothing outside the toolchain), the symbol graph comes from
# `swift package dump-symbol-graph` and the toolchain's `docc convert` builds the archive.
set -euo pipefail
cd "$(dirname "$0")/.."
output=${1:-.build/documentation}
mkdir -p "$output"
archive="$output/KeyAuth.doccarchive"

if swift package plugin --list 2>/dev/null | grep -q "generate-documentation"; then
    swift package generate-documentation --target KeyAuth --warnings-as-errors --output-path "$archive"
    exit 0
fi

docc=$(command -v docc || true)
if [ -z "$docc" ]; then
    docc=$(dirname "$(readlink -f "$(command -v swift)")")/docc
fi
swift package dump-symbol-graph --minimum-access-level public >/dev/null
graphs=$(mktemp -d)
trap 'rm -rf "$graphs"' EXIT
# Only the library's own graphs: the others would add their modules' symbols to its pages.
cp .build/*/symbolgraph/KeyAuth.symbols.json .build/*/symbolgraph/KeyAuth@*.symbols.json "$graphs"/ 2>/dev/null || \
    cp .build/*/symbolgraph/KeyAuth.symbols.json "$graphs"/
"$docc" convert Sources/KeyAuth/KeyAuth.docc --additional-symbol-graph-dir "$graphs" \
    --fallback-display-name KeyAuth --fallback-bundle-identifier org.keyauth.KeyAuth \
    --output-path "$archive" --warnings-as-errors
echo "documentation: $archive" >&2
