// Package hfparity checks the engine against an independent implementation,
// Hugging Face transformers, on real checkpoints of both supported
// architectures.
//
// The checkpoints are small, randomly initialised LlamaForCausalLM and
// Qwen3ForCausalLM models (4 layers, hidden 256, a 1024-token vocabulary)
// generated deterministically from a fixed seed by this package's tests,
// written as safetensors + config.json + tokenizer.json exactly as
// transformers saves them. testdata/ holds what transformers computed for a
// fixed 64-token prompt: the logits at every prompt position and a greedy
// continuation (see testdata/README.md for how they were produced). The test
// regenerates the checkpoints, converts them with engine/convert (F32),
// runs them on the CPU reference backend and requires identical greedy
// tokens and max |logit difference| / max |logit| <= 1e-4.
package hfparity
