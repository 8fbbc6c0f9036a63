#!/usr/bin/env bash
# Builds the Debian packages dist/keyauth_VERSION-REVISION_ARCH.deb and its debug symbols,
# dist/keyauth-dbgsym_VERSION-REVISION_ARCH.deb, with dpkg-deb; prints their paths, in that order.
#
#   bash scripts/build-deb.sh
#
# Builds keyauth and keyauth-server in release mode with the Swift runtime linked statically
# (--static-swift-stdlib, in .build-deb/), so the package needs no Swift toolchain; moves their
# debug information (DWARF and the full symbol table) into keyauth-dbgsym, as Debian's dh_strip
# does: /usr/lib/debug/.build-id/XX/YYYY.debug, named by each binary's GNU build ID, where gdb,
# systemd-coredump and debuginfod look, so that a core of a stripped binary still gives a
# backtrace with function names and lines; strips them;
# writes the man pages from their --help (scripts/make-manpages.py); and lays out the package
# builds the PAM module pam_keyauth.so with cc (scripts/build-pam-module.sh) into the multiarch
# security directory, with an example stack in /usr/share/doc/keyauth/examples/pam.d (never
# enabled by the package); and lays out the package
# from packaging/: completions, /etc/pam.d/keyauth, /etc/keyauth/server.conf (conffiles), the
# systemd unit, the maintainer scripts, the DEP-5 copyright and the changelogs. Depends comes
# from dpkg-shlibdeps on the stripped binaries (plus adduser, which postinst uses), and the
# build fails unless it names the five C libraries keyauth is built on.
#
# The version is the one `keyauth --version` prints (KeyAuthClient.version); the Debian
# revision and the maintainer come from the top entry of packaging/debian/changelog, which must
# be for that version. File times are set to the last commit's (SOURCE_DATE_EPOCH), so two
# builds of one commit give the same package contents.
#
# Needs: the Swift toolchain, dpkg-dev (dpkg-shlibdeps), binutils (strip, objcopy, readelf),
# python3, gzip.
# Environment: KEYAUTH_DEB_SKIP_BUILD=1 packages the binaries already in .build-deb/release.
set -euo pipefail
umask 022
cd "$(dirname "$0")/.."
root=$PWD

log() { echo "build-deb: $*" >&2; }

scratch=$root/.build-deb
if [ "${KEYAUTH_DEB_SKIP_BUILD:-}" != 1 ]; then
    log "swift build -c release --static-swift-stdlib (keyauth, keyauth-server)"
    for product in keyauth keyauth-server; do
        swift build -c release --static-swift-stdlib --scratch-path "$scratch" --product "$product" \
            -Xlinker -z -Xlinker relro -Xlinker -z -Xlinker now -Xlinker --build-id=sha1 >&2
    done
fi
bin=$scratch/release
# The PAM module with the C compiler alone (no Swift toolchain link step; Debian's hardening flags).
bash "$root/scripts/build-pam-module.sh" "$bin/pam_keyauth.so" >&2
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

version=$("$bin/keyauth" --version | awk '{ print $2 }')
server_version=$("$bin/keyauth-server" --version | awk '{ print $2 }')
if [ -z "$version" ] || [ "$version" != "$server_version" ]; then
    log "keyauth says version '$version' and keyauth-server '$server_version'; they must agree"
    exit 1
fi

# The top entry of the Debian changelog: "keyauth (VERSION-REVISION) ..." and its trailer.
changelog=$root/packaging/debian/changelog
debian_version=$(sed -n '1s/^keyauth (\([^)]*\)).*/\1/p' "$changelog")
if [ "${debian_version%-*}" != "$version" ]; then
    log "packaging/debian/changelog starts with $debian_version, not $version-N: add an entry for $version"
    exit 1
fi
maintainer=$(sed -n 's/^ -- \(.*>\)  .*/\1/p' "$changelog" | head -1)
arch=$(dpkg --print-architecture)
package=keyauth_${debian_version}_${arch}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

stage=$root/dist/stage/$package
dbgsym_stage=$root/dist/stage/keyauth-dbgsym_${debian_version}_${arch}
rm -rf "$stage" "$dbgsym_stage"
mkdir -p "$stage/DEBIAN" "$dbgsym_stage/DEBIAN" "$root/dist"

# Binaries, stripped of symbols and build notes, each with a .gnu_debuglink to its debug file;
# the debug files, compressed, in keyauth-dbgsym. The GNU build ID (the linker's hash of the
# binary, kept by strip) ties the two: a debug file from another build is never used.
install -d "$stage/usr/bin"
build_ids=()
# Where each built file goes: the commands in /usr/bin, the module in the multiarch security
# directory.
declare -A destination=([keyauth]=usr/bin/keyauth [keyauth-server]=usr/bin/keyauth-server
    [pam_keyauth.so]=usr/lib/$multiarch/security/pam_keyauth.so)
declare -A file_mode=([keyauth]=0755 [keyauth-server]=0755 [pam_keyauth.so]=0644)
for program in keyauth keyauth-server pam_keyauth.so; do
    build_id=$(readelf --notes "$bin/$program" | sed -n 's/^ *Build ID: \([0-9a-f]\{40\}\)$/\1/p')
    if [ -z "$build_id" ]; then
        log "$bin/$program has no GNU build ID (the link needs --build-id)"
        exit 1
    fi
    # grep reads all of readelf's output (no -q): with -q under pipefail, readelf dies of SIGPIPE
    # when grep exits at the match before it has written the rest, and the check fails by chance.
    if ! readelf --section-headers "$bin/$program" | grep ' \.debug_info ' >/dev/null; then
        log "$bin/$program has no DWARF (.debug_info): the release build must be built with -g"
        exit 1
    fi
    debug_file=$dbgsym_stage/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug
    install -d "$(dirname "$debug_file")"
    objcopy --only-keep-debug --compress-debug-sections "$bin/$program" "$debug_file"
    chmod 0644 "$debug_file"
    installed=$stage/${destination[$program]}
    install -D -m "${file_mode[$program]}" "$bin/$program" "$installed"
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$installed"
    objcopy --add-gnu-debuglink="$debug_file" "$installed"
    if ! readelf --notes "$installed" | grep "Build ID: $build_id\$" >/dev/null; then
        log "the stripped $program lost its build ID"
        exit 1
    fi
    build_ids+=("$build_id")
done

# The module's helper is keyauth under another name (a second statically linked binary would
# add about 60 MB); in /usr/libexec because no one runs it by hand.
install -d "$stage/usr/libexec/keyauth"
ln -s ../../bin/keyauth "$stage/usr/libexec/keyauth/keyauth-pam-helper"

# Man pages from the stripped binaries' --help, so they describe exactly what is shipped.
log "man pages"
manual=$root/dist/stage/man
rm -rf "$manual"
python3 "$root/scripts/make-manpages.py" "$stage/usr/bin" "$manual"
install -d "$stage/usr/share/man/man1" "$stage/usr/share/man/man8"
gzip -9n <"$manual/keyauth.1" >"$stage/usr/share/man/man1/keyauth.1.gz"
gzip -9n <"$manual/keyauth-server.8" >"$stage/usr/share/man/man8/keyauth-server.8.gz"

# Completions, configuration, the unit.
completions=$root/packaging/completions
install -D -m 0644 "$completions/bash/keyauth" "$stage/usr/share/bash-completion/completions/keyauth"
install -D -m 0644 "$completions/bash/keyauth-server" "$stage/usr/share/bash-completion/completions/keyauth-server"
install -D -m 0644 "$completions/zsh/_keyauth" "$stage/usr/share/zsh/vendor-completions/_keyauth"
install -D -m 0644 "$completions/zsh/_keyauth-server" "$stage/usr/share/zsh/vendor-completions/_keyauth-server"
install -D -m 0644 "$completions/fish/keyauth.fish" "$stage/usr/share/fish/vendor_completions.d/keyauth.fish"
install -D -m 0644 "$completions/fish/keyauth-server.fish" "$stage/usr/share/fish/vendor_completions.d/keyauth-server.fish"
install -D -m 0644 "$root/packaging/etc/pam.d/keyauth" "$stage/etc/pam.d/keyauth"
install -D -m 0644 "$root/packaging/etc/keyauth/server.conf" "$stage/etc/keyauth/server.conf"
install -D -m 0644 "$root/packaging/systemd/keyauth-server.service" "$stage/lib/systemd/system/keyauth-server.service"
install -D -m 0644 "$root/packaging/systemd/keyauth-agent.service" "$stage/usr/lib/systemd/user/keyauth-agent.service"

# Documentation: copyright, both changelogs, the README, the manuals and the contract.
doc=$stage/usr/share/doc/keyauth
install -D -m 0644 "$root/packaging/debian/copyright" "$doc/copyright"
gzip -9n <"$changelog" >"$doc/changelog.Debian.gz"
gzip -9n <"$root/CHANGELOG.md" >"$doc/changelog.gz"
gzip -9n <"$root/README.md" >"$doc/README.md.gz"
install -D -m 0644 "$root/packaging/examples/pam.d/keyauth" "$doc/examples/pam.d/keyauth"
for manual in "$root"/docs/*.md; do
    gzip -9n <"$manual" >"$doc/$(basename "$manual").gz"
done
if [ -f "$root/packaging/debian/lintian-overrides" ]; then
    install -D -m 0644 "$root/packaging/debian/lintian-overrides" "$stage/usr/share/lintian/overrides/keyauth"
fi

# Depends: the shared libraries the binaries load, found by dpkg-shlibdeps (which wants a
# debian/control to read, so it runs in a scratch directory that has one).
log "dpkg-shlibdeps"
shlibs_dir=$root/dist/stage/shlibdeps
rm -rf "$shlibs_dir"
mkdir -p "$shlibs_dir/debian"
printf 'Source: keyauth\n\nPackage: keyauth\nArchitecture: any\n' >"$shlibs_dir/debian/control"
shlibs=$(cd "$shlibs_dir" && dpkg-shlibdeps -O -e"$stage/usr/bin/keyauth" -e"$stage/usr/bin/keyauth-server" \
    -e"$stage/${destination[pam_keyauth.so]}" 2>&1 |
    sed -n 's/^shlibs:Depends=//p')
for library in libssl3 libpam0g libmicrohttpd12 libsqlite3-0 libpq5 libtss2-esys-3.0.2-0 libtss2-tctildr0 \
    libtss2-mu0 libtss2-rc0; do
    if ! grep -qE "(^|, )$library( |,|\$)" <<<"$shlibs"; then
        log "dpkg-shlibdeps found no $library in: $shlibs"
        exit 1
    fi
done
if grep -q /opt/swift <<<"$(ldd "$stage/usr/bin/keyauth" "$stage/usr/bin/keyauth-server" \
    "$stage/${destination[pam_keyauth.so]}")"; then
    log "a binary still loads a library from the Swift toolchain"
    exit 1
fi
depends="$shlibs, adduser"

# Writes DIR/DEBIAN/control from TEMPLATE, with Installed-Size as dpkg-gencontrol counts it
# (KiB per file, rounded up, and 1 per directory) and DEPENDS, and DIR/DEBIAN/md5sums; sets every
# file time to SOURCE_DATE_EPOCH; builds dist/DIR's-name.deb and prints its path.
build_package() {
    local dir=$1 template=$2 package_depends=$3
    local deb size
    deb=$root/dist/$(basename "$dir").deb
    size=$(cd "$dir" && find . -path ./DEBIAN -prune -o \( -type f -printf '%s\n' \) -o \( -type d -printf '1024\n' \) |
        awk '{ total += int(($1 + 1023) / 1024) } END { print total }')
    sed -e "s|@VERSION@|$debian_version|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maintainer|" \
        -e "s|@INSTALLED_SIZE@|$size|" -e "s|@DEPENDS@|$package_depends|" -e "s|@BUILD_IDS@|${build_ids[*]}|" \
        "$template" >"$dir/DEBIAN/control"
    (cd "$dir" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$dir/DEBIAN/md5sums"
    chmod 0644 "$dir/DEBIAN/control" "$dir/DEBIAN/md5sums"
    find "$dir" -exec touch --no-dereference --date="@$SOURCE_DATE_EPOCH" {} +
    dpkg-deb --root-owner-group -Zxz --build "$dir" "$deb" >&2
    log "$(du -h "$deb" | cut -f1) $deb (installed: $size KiB)"
    echo "$deb"
}

# Control files.
install -m 0755 "$root/packaging/debian/postinst" "$root/packaging/debian/prerm" \
    "$root/packaging/debian/postrm" "$stage/DEBIAN/"
(cd "$stage" && find etc -type f | sort | sed 's|^|/|') >"$stage/DEBIAN/conffiles"
chmod 0644 "$stage/DEBIAN/conffiles"
log "Depends: $depends"
build_package "$stage" "$root/packaging/debian/control.in" "$depends"

# keyauth-dbgsym: the debug files, and its documentation directory as a link to keyauth's (the
# copyright), which Debian policy allows since it depends on exactly this keyauth.
install -d "$dbgsym_stage/usr/share/doc"
ln -s keyauth "$dbgsym_stage/usr/share/doc/keyauth-dbgsym"
build_package "$dbgsym_stage" "$root/packaging/debian/control-dbgsym.in" "keyauth (= $debian_version)"
