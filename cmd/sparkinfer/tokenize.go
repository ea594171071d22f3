package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/sparkinfer/cc/engine/embedded"
	"github.com/sparkinfer/cc/engine/gguf"
	"github.com/sparkinfer/cc/engine/tokenizer"
	"github.com/sparkinfer/cc/internal/cli"
)

// cmdTokenize prints the token ids of the text on stdin.
func cmdTokenize(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkinfer", "tokenize", env)
	modelPath := fs.String("model", "", "GGUF file whose tokenizer to use (default: the embedded stories260K)")
	hfPath := fs.String("hf-tokenizer", "", "Hugging Face tokenizer.json to use instead of a GGUF")
	hfConfig := fs.String("hf-config", "", "tokenizer_config.json to read with --hf-tokenizer (BOS/EOS, add_bos)")
	jsonl := fs.Bool("jsonl", false, "each input line is a JSON string; print one JSON array of ids per line")
	addSpecial := fs.Bool("add-special", false, "add BOS/EOS as the vocabulary says")
	parseSpecial := fs.Bool("parse-special", false, "turn special-token text such as <|eot_id|> into its token")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if *modelPath != "" && *hfPath != "" {
		return 2, cli.Usagef("give --model or --hf-tokenizer, not both")
	}
	if *hfConfig != "" && *hfPath == "" {
		return 2, cli.Usagef("--hf-config needs --hf-tokenizer")
	}
	tok, err := loadTokenizer(*modelPath, *hfPath, *hfConfig)
	if err != nil {
		return 2, &cli.UsageError{Err: err}
	}
	out := bufio.NewWriter(env.Stdout)
	defer out.Flush()
	if !*jsonl {
		text, err := io.ReadAll(env.Stdin)
		if err != nil {
			return 1, fmt.Errorf("reading stdin: %w", err)
		}
		ids := tok.Encode(string(text), *addSpecial, *parseSpecial)
		buf := make([]byte, 0, 8*len(ids)+1)
		for i, id := range ids {
			if i > 0 {
				buf = append(buf, ' ')
			}
			buf = strconv.AppendInt(buf, int64(id), 10)
		}
		buf = append(buf, '\n')
		_, err = out.Write(buf)
		return 0, err
	}
	r := bufio.NewReaderSize(env.Stdin, 1<<16)
	for line := 1; ; line++ {
		raw, err := r.ReadBytes('\n')
		if len(raw) == 0 && err == io.EOF {
			return 0, nil
		}
		if err != nil && err != io.EOF {
			return 1, fmt.Errorf("reading stdin: %w", err)
		}
		var text string
		if jerr := json.Unmarshal(raw, &text); jerr != nil {
			return 2, &cli.UsageError{Err: fmt.Errorf("stdin line %d: want a JSON string: %v", line, jerr),
				Hint: `with --jsonl each line is a JSON string, e.g. "Hello, world"`}
		}
		ids := tok.Encode(text, *addSpecial, *parseSpecial)
		if ids == nil {
			ids = []int{}
		}
		b, _ := json.Marshal(ids)
		b = append(b, '\n')
		if _, werr := out.Write(b); werr != nil {
			return 1, werr
		}
		if err == io.EOF {
			return 0, nil
		}
	}
}

// loadTokenizer reads the tokenizer of a GGUF file, of a tokenizer.json, or
// of the embedded model.
func loadTokenizer(modelPath, hfPath, hfConfig string) (*tokenizer.Tokenizer, error) {
	if hfPath != "" {
		data, err := os.ReadFile(hfPath)
		if err != nil {
			return nil, err
		}
		var cfg []byte
		if hfConfig != "" {
			if cfg, err = os.ReadFile(hfConfig); err != nil {
				return nil, err
			}
		}
		tok, err := tokenizer.FromHFConfig(data, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", hfPath, err)
		}
		return tok, nil
	}
	var f *gguf.File
	var err error
	if modelPath == "" {
		f, err = gguf.Parse(embedded.Stories260K)
	} else {
		f, err = gguf.Open(modelPath)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		var ue *tokenizer.UnsupportedError
		if errors.As(err, &ue) {
			return nil, err
		}
		name := modelPath
		if name == "" {
			name = embedded.Stories260KName
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return tok, nil
}
