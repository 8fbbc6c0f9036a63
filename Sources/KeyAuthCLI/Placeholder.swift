import KeyAuth
