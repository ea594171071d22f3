"""Computes the golden outputs of TestTransformersParity with Hugging Face
transformers (run on the GPU machine, where transformers and torch are
installed; it uses the CPU in float32 with eager attention).

usage: python3 hf_reference.py CHECKPOINTS_DIR OUT_DIR
CHECKPOINTS_DIR holds llama/ and qwen3/ as written by
HFPARITY_OUT=DIR go test -run TestWriteCheckpoints ./engine/hfparity
"""
import json, os, sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
torch.set_grad_enabled(False)
for name in ("llama", "qwen3"):
    d = os.path.join(src, name)
    spec = json.load(open(os.path.join(d, "prompt.json")))
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    ids = torch.tensor([spec["prompt"]], dtype=torch.long)
    logits = m(ids).logits[0].to(torch.float32).numpy()
    seq = list(spec["prompt"])
    greedy = []
    nxt = int(np.argmax(logits[-1]))
    while len(greedy) < spec["greedy"]:
        greedy.append(nxt)
        seq.append(nxt)
        l = m(torch.tensor([seq], dtype=torch.long)).logits[0, -1]
        nxt = int(torch.argmax(l))
    logits.astype("<f4").tofile(os.path.join(out, name + ".logits.f32"))
    json.dump({"prompt": spec["prompt"], "greedy": greedy, "transformers": transformers.__version__,
               "torch": torch.__version__}, open(os.path.join(out, name + ".json"), "w"))
    print(name, "max |logit|", float(np.abs(logits).max()), "greedy", greedy[:8], "...")
