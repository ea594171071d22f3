// Package protovec reads and rewrites the test vectors embedded in
// docs/PROTOCOL.md, so that the tests of keys and keys/ohttp check the
// document byte for byte and the document cannot drift from the code.
//
// A vector is a fenced code block whose info string is "hex vector:NAME"
// (the bytes in hexadecimal, whitespace ignored) or "text vector:NAME" (the
// exact text between the fences, without the newline before the closing
// fence). Names are unique.
package protovec

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
)

const fence = "```"

type block struct {
	kind, name string
	start, end int // byte range of the content lines in the document
}

func scan(doc []byte) ([]block, error) {
	var out []block
	seen := map[string]bool{}
	lines := bytes.SplitAfter(doc, []byte("\n"))
	off := 0
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(string(lines[i]), "\n")
		lineEnd := off + len(lines[i])
		if !strings.HasPrefix(line, fence) {
			off = lineEnd
			continue
		}
		info := strings.TrimSpace(strings.TrimPrefix(line, fence))
		// Find the closing fence.
		j := i + 1
		contentStart := lineEnd
		p := lineEnd
		for ; j < len(lines); j++ {
			if strings.TrimRight(string(lines[j]), "\n") == fence {
				break
			}
			p += len(lines[j])
		}
		if j == len(lines) {
			return nil, fmt.Errorf("protovec: unclosed code block %q", info)
		}
		kind, name, ok := strings.Cut(info, " vector:")
		if ok {
			if kind != "hex" && kind != "text" {
				return nil, fmt.Errorf("protovec: vector %q: unknown kind %q", name, kind)
			}
			if name == "" || seen[name] {
				return nil, fmt.Errorf("protovec: empty or duplicate vector name %q", name)
			}
			seen[name] = true
			out = append(out, block{kind: kind, name: name, start: contentStart, end: p})
		}
		off = p + len(lines[j])
		i = j
	}
	return out, nil
}

// Parse returns the vectors of a document by name.
func Parse(doc []byte) (map[string][]byte, error) {
	blocks, err := scan(doc)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(blocks))
	for _, b := range blocks {
		content := doc[b.start:b.end]
		switch b.kind {
		case "hex":
			v, err := hex.DecodeString(strings.Join(strings.Fields(string(content)), ""))
			if err != nil {
				return nil, fmt.Errorf("protovec: vector %q: %v", b.name, err)
			}
			out[b.name] = v
		case "text":
			out[b.name] = bytes.Clone(bytes.TrimSuffix(content, []byte("\n")))
		}
	}
	return out, nil
}

// Rewrite replaces the content of every vector block with vals[name]; it
// fails when a block has no value or a value has no block.
func Rewrite(doc []byte, vals map[string][]byte) ([]byte, error) {
	blocks, err := scan(doc)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	var out []byte
	last := 0
	for _, b := range blocks {
		v, ok := vals[b.name]
		if !ok {
			return nil, fmt.Errorf("protovec: no value for vector %q", b.name)
		}
		used[b.name] = true
		out = append(out, doc[last:b.start]...)
		out = append(out, Format(b.kind, v)...)
		last = b.end
	}
	out = append(out, doc[last:]...)
	for name := range vals {
		if !used[name] {
			return nil, fmt.Errorf("protovec: vector %q has no block in the document", name)
		}
	}
	return out, nil
}

// Format renders a vector's content as it appears between the fences.
func Format(kind string, v []byte) string {
	if kind == "text" {
		return string(v) + "\n"
	}
	h := hex.EncodeToString(v)
	var sb strings.Builder
	for len(h) > 64 {
		sb.WriteString(h[:64])
		sb.WriteByte('\n')
		h = h[64:]
	}
	sb.WriteString(h)
	sb.WriteByte('\n')
	return sb.String()
}
