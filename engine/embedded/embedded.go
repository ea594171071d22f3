// Package embedded carries the default model compiled into the binary, so the
// quick start needs no download.
//
// Stories260K is the tinyllamas "stories260K" checkpoint (a real trained
// Llama-architecture model, 260K parameters, all tensors F32) converted to
// GGUF; sha256 270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d.
package embedded

import _ "embed"

// Stories260KName is the name the default model is known by.
const Stories260KName = "stories260K"

// Stories260K is the GGUF file's bytes. Callers must not modify it.
//
//go:embed stories260K.gguf
var Stories260K []byte
