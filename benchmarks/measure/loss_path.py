"""Which vocabulary-sized tensors the training loss path holds, on the CPU, from the profiler.

    python -m benchmarks.measure.loss_path [--out FILE]

A model whose logits dwarf everything else (2 narrow layers, a 151,936-token vocabulary) takes
one LoRA training step the way the HF Trainer runs it (`model(input_ids, labels=...)`, then
`loss.backward()`), with peft adapters on every linear layer, in a fresh process per setup:
16-bit weights, fp32 weights as `prepare_model_for_kbit_training` leaves lm_head and the norms
(QLoRA), and either one under `torch.autocast` (the Trainer's `bf16=True`).  The peak of live
tensors above the step's start, divided by tokens × vocabulary, is the loss path's bytes per
vocabulary entry per token (the layers add well under 1 % here); the op running at the peak
names the tensor.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from .fresh_process import emit, write_fresh_rows
from .profiler_peak import live_tensor_peak

RESULTS = Path(__file__).resolve().parents[1] / "results"
SETUPS = ("bf16", "bf16-autocast", "fp32-head-autocast", "fp32")
TOKENS = 512
VOCAB = 151936
FIELDS = ("setup", "tokens", "vocab", "step_peak_bytes", "bytes_per_vocab_token", "op_at_peak", "torch_version",
          "transformers_version", "peft_version", "date")


def measure(setup: str) -> dict:
    import peft
    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False,
                                   max_position_embeddings=4096)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    if setup.startswith("bf16"):
        model = model.to(torch.bfloat16)
    elif setup.startswith("fp32-head"):
        # prepare_model_for_kbit_training: the quantized linears stay 4-bit, everything else fp32
        model = model.to(torch.bfloat16)
        model.lm_head.float()
        model.model.norm.float()
    model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules="all-linear", lora_dropout=0.0))
    ids = torch.randint(3, VOCAB, (1, TOKENS))
    autocast = setup.endswith("autocast")

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    step()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    peak, innermost = live_tensor_peak(prof)
    return {"setup": setup, "tokens": TOKENS, "vocab": VOCAB, "step_peak_bytes": peak,
            "bytes_per_vocab_token": round(peak / (TOKENS * VOCAB), 2), "op_at_peak": innermost,
            "torch_version": torch.__version__.split("+")[0], "transformers_version": transformers.__version__,
            "peft_version": peft.__version__, "date": datetime.date.today().isoformat()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS / f"cpu-loss-path-{datetime.date.today().isoformat()}.csv")
    ap.add_argument("--setups", default=",".join(SETUPS), help="comma-separated, of: " + ", ".join(SETUPS))
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        emit(measure(args.one))
        return 0
    write_fresh_rows(args.out, FIELDS, "benchmarks.measure.loss_path", args.setups.split(","),
                     lambda row: f"{row['setup']:20s} {row['bytes_per_vocab_token']:6.2f} B per vocabulary entry "
                                 f"per token at {row['op_at_peak']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
