// Package tokenizer turns text into token ids and back, for the two
// tokenizer families of llama.cpp's GGUF files:
//
//   - SentencePiece-style ("llama", [ModelSPM]): spaces are escaped as
//     U+2581 and a space is prefixed to the text; adjacent symbols are
//     merged by the score of the token they form; characters that are not
//     tokens fall back to byte tokens <0xHH>. Llama 1/2, stories260K.
//   - Byte-level BPE ("gpt2", [ModelBPE]): text is split into words by a
//     pre-tokenizer ("gpt-2", "llama-bpe" for Llama 3, "qwen2" for
//     Qwen2/Qwen3), each word's bytes are spelt in GPT-2's byte characters
//     and merged by merge rank.
//
// The vocabulary comes from GGUF metadata ([FromGGUF], keys
// tokenizer.ggml.*) or a Hugging Face tokenizer.json ([FromHF],
// [FromHFConfig]); both produce a [Vocab], which [New] checks and turns
// into a [Tokenizer]. Encoding follows llama.cpp's llama_tokenize exactly,
// including special-token splitting (control tokens only with
// parseSpecial; user-defined tokens always) and the SPM space prefix, and
// is tested against llama.cpp's tokenizer test vectors, which were made
// with the original Hugging Face tokenizers.
//
// Decoding ([Tokenizer.Decode], [StreamDecoder]) renders normal, byte and
// user-defined tokens and drops control tokens; with SPM the leading space
// of the first piece is dropped, as SentencePiece does. A StreamDecoder
// never returns part of a UTF-8 character.
//
// What is checked: a Vocab's sizes, token types, byte tokens, special ids
// and merges are validated by New, so malformed metadata gives a
// *VocabError or *UnsupportedError, never a panic. What is not: that the
// vocabulary is the one the model was trained with, and Hugging Face
// normalizers other than the SPM space escaping (for example Qwen's NFC)
// are not applied; neither are added tokens' lstrip/rstrip flags. Decode
// does not apply Hugging Face's clean_up_tokenization_spaces.
package tokenizer
