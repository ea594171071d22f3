// Package reproducible names the source a binary was built from and reports
// what a running binary is.
//
// # Source hash
//
// The source hash is the SHA-256 of a manifest: one line per tracked file,
//
//	<sha256 of the file's bytes, lowercase hex>  <mode>  <path>\n
//
// (two spaces between the fields), sorted by path as raw bytes. Mode is git's
// notation: 100644 for a regular file, 100755 for a regular file with any
// execute bit set, 120000 for a symbolic link, whose "bytes" are its target
// as returned by readlink (the link is never followed). Paths are relative to
// the source root, use '/' as the separator and are written as they are, so
// a path containing a control character (newline, NUL, ...), a backslash, a
// "." or ".." element, or a leading '/' is refused rather than escaped. An
// empty tree has an empty manifest.
//
// Example: a tree with a file "a.txt" holding "hi\n" and an executable
// "run.sh" holding "#!/bin/sh\n" has the manifest
//
//	98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4  100644  a.txt
//	a8076d3d28d21e02012b20eaf7dbf75409a6277134439025f282e368e3305abf  100755  run.sh
//
// and its source hash is the SHA-256 of those two newline-terminated lines,
// 05311edddee52c4febe467e4c495efc432cc2d856bb45ce925e1dc1bd1d44c95
// (the same as `sha256sum` of the manifest file).
//
// Which files are tracked:
//
//   - In a git checkout (DIR/.git exists) the tracked files are the ones
//     `git ls-files` lists (the index), read from the working tree as they
//     are on disk, so uncommitted edits of tracked files count and untracked
//     files do not. A tracked file missing from the working tree is an error,
//     as is a submodule (git mode 160000).
//   - In any other directory (a `git archive` export, a source tarball) every
//     regular file and symbolic link counts, except the contents of any
//     directory named ".git". Empty directories count for nothing, as in git.
//     Other file types (devices, sockets, pipes) are an error.
//
// So a clean checkout and `git archive HEAD` extracted elsewhere have the same
// source hash. The hash does not depend on the directory the source lies in,
// on timestamps, owners or permission bits other than the execute bits.
//
// # Build info
//
// A release build passes the source hash to the linker
// (-X github.com/sparkinfer/cc/reproducible.embeddedSourceHash=<hex>); see
// [Embedded]. Any other build reports that it has none ("unknown (dev
// build)"): nothing here invents a value. [Describe] adds what a running
// binary can measure about itself: the SHA-256 of its own executable file,
// the Go version and build settings recorded by the toolchain, and the digest
// of the kernels library it would load.
//
// What is not checked here: that the embedded hash is true. A binary can
// claim any source hash; the claim is worth something only through a
// rebuild that reproduces the binary's digest (package
// github.com/sparkinfer/cc/reproducible/release) and through attestation of
// that digest.
package reproducible
