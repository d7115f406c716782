"""When full fine-tuning's gradients and AdamW's tensors are allocated and freed, relative to the
loss and the layers: the allocator events of a tiny full fine-tuning loop shaped like ms-swift's
recipe (HF Trainer, torch 2.1), recorded on the CPU with the profiler's memory events.

    python -m benchmarks.measure.grad_trace [--lengths 96,160,64] [--windows 2] [--min-bytes 4096]

The loop: a random-init causal LM (Llama architecture, untied embeddings like Qwen(1)) in bf16
weights, forward under bf16 autocast with gradient checkpointing, micro-batches of the given lengths
with gradient accumulation (the loss divided by their number), `clip_grad_norm_(max_norm=1.0)`,
AdamW(foreach=True), `zero_grad(set_to_none=True)`, `--windows` optimizer steps -- what
transformers 4.36's Trainer._inner_training_loop does.  Each parameter's tensor hook (which runs
before AccumulateGrad, torch/csrc/autograd/functions/accumulate_grad.h) and post-accumulate hook
mark when its gradient arrives and what `p.grad` is after it; every allocation at least
`--min-bytes` is printed with its label (the parameter whose incoming gradient it is, `p.grad`,
an optimizer state, or the phase it falls in) and when it is freed.  AdamW's tensors are named after
the step by their addresses (`state NAME exp_avg @ADDR ...`).  What it showed is in
docs/accuracy.md, "ms-swift's counter, replayed".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


def build(vocab: int, hidden: int, inter: int, layers: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False,
                      max_position_embeddings=4096)
    model = LlamaForCausalLM(cfg)
    torch.nn.Module.to(model, torch.bfloat16)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.config.use_cache = False
    model.train()
    return model


def record(lengths: list[int], windows: int, vocab: int, hidden: int, inter: int, layers: int):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    model = build(vocab, hidden, inter, layers)
    names = {id(p): n for n, p in model.named_parameters()}

    def mark(text: str) -> None:
        with record_function("M|" + text):
            pass

    def incoming(n: str):
        def hook(g) -> None:
            mark(f"incoming grad {n} @{g.data_ptr():x} {g.nbytes}")
        return hook

    def accumulated(n: str):
        def hook(p) -> None:
            mark(f"p.grad {n} @{p.grad.data_ptr():x} {p.grad.nbytes}")
        return hook

    for p in model.parameters():
        p.register_hook(incoming(names[id(p)]))
        p.register_post_accumulate_grad_hook(accumulated(names[id(p)]))
    # the Trainer's two groups (transformers v4.36.2 trainer.py create_optimizer): weights with decay,
    # then biases and norms without
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    groups: list[dict] = [{"params": decay},
                          {"params": [p for p in model.parameters() if p.dim() <= 1], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-5, foreach=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for w in range(windows):
            for i, n in enumerate(lengths):
                ids = torch.randint(0, vocab, (1, n))
                mark(f"window {w} micro-batch {i} ({n} tokens): forward")
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = model(input_ids=ids, labels=ids)
                loss = out.loss / len(lengths)
                del out
                mark(f"window {w} micro-batch {i}: backward")
                loss.backward()
                del loss
            mark(f"window {w}: clip_grad_norm_")
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            mark(f"window {w}: optimizer.step")
            opt.step()
            for p in model.parameters():
                st = opt.state[p]
                mark(f"state {names[id(p)]} exp_avg @{st['exp_avg'].data_ptr():x} "
                     f"exp_avg_sq @{st['exp_avg_sq'].data_ptr():x}")
            mark(f"window {w}: zero_grad")
            model.zero_grad(set_to_none=True)
        mark("end")
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)["traceEvents"]
    os.unlink(path)
    timeline = []
    for e in trace:
        if e.get("name", "").startswith("M|"):
            timeline.append((float(e["ts"]), 0, "mark", e["name"][2:]))
        elif e.get("name") == "[memory]" and e["args"].get("Device Type", 0) == 0:
            timeline.append((float(e["ts"]), 1 + e["args"].get("Ev Idx", 0), "mem",
                             (e["args"]["Addr"], e["args"]["Bytes"])))
    timeline.sort(key=lambda x: (x[0], x[1]))
    sizes = {names[id(p)]: p.nbytes for p in model.parameters()}
    return timeline, sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="96,160,64")
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--inter", type=int, default=448)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--min-bytes", type=int, default=4096)
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    timeline, sizes = record(lengths, args.windows, args.vocab, args.hidden, args.inter, args.layers)
    by_size: dict[int, list[str]] = {}
    for n, b in sizes.items():
        by_size.setdefault(b, []).append(n)
    live: dict[int, tuple[int, int]] = {}
    serial = 0
    for _, _, kind, x in timeline:
        if kind == "mark":
            print(f"-- {x}")
            continue
        addr, nbytes = x
        if nbytes > 0:
            serial += 1
            live[addr] = (serial, nbytes)
            if nbytes >= args.min_bytes:
                hint = "/".join(by_size.get(nbytes, [])[:2])
                print(f"   + #{serial} {nbytes} B @{addr:x}" + (f"  (param-sized: {hint})" if hint else ""))
        elif addr in live:
            s, b = live.pop(addr)
            if b >= args.min_bytes:
                print(f"   - #{s} {b} B @{addr:x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
