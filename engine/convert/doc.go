// Package convert turns Hugging Face checkpoints (safetensors, config.json,
// tokenizer.json) into GGUF files with the names and metadata llama.cpp's
// convert_hf_to_gguf.py uses, for the llama and qwen3 architectures.
package convert
