#!/usr/bin/env python3
"""export_torch_models.py - the issue-35 benchmark models that need torch to
make, exported with random weights (no download): MobileNetV3-Large and
EfficientNet-B0 from torchvision, DistilBERT-base (6 layers, hidden 768,
sequence 128) from transformers' config. Run with the torch venv, not CI's:

  /work/venv-torch/bin/python bench/cpu/export_torch_models.py --out /tmp/m \
      [--which mobilenetv3,efficientnet_b0,distilbert]

Writes DIR/<name>.onnx with a dynamic batch (input: `input` 1x3x224x224 for
the image models; `input_ids`, `attention_mask` int64 Bx128 for DistilBERT),
opset 17, through the TorchScript exporter. The files are large (20-270 MB):
keep them out of the repository.
"""

import argparse
import os

import torch


def export(model, args, path, names, dyn):
    model.eval()
    with torch.no_grad():
        torch.onnx.export(model, args, path, input_names=names, output_names=["output"],
                          dynamic_axes=dyn, opset_version=17, dynamo=False)
    print("wrote %s (%.1f MB)" % (path, os.path.getsize(path) / 1e6))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/models")
    ap.add_argument("--which", default="mobilenetv3,efficientnet_b0,distilbert")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    for name in a.which.split(","):
        path = os.path.join(a.out, name + ".onnx")
        if name in ("mobilenetv3", "efficientnet_b0"):
            import torchvision
            m = (torchvision.models.mobilenet_v3_large(weights=None) if name == "mobilenetv3"
                 else torchvision.models.efficientnet_b0(weights=None))
            export(m, (torch.randn(1, 3, 224, 224),), path, ["input"],
                   {"input": {0: "batch"}, "output": {0: "batch"}})
        elif name == "distilbert":
            from transformers import DistilBertConfig, DistilBertModel

            class Wrap(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.m = DistilBertModel(DistilBertConfig(attn_implementation="eager"))

                def forward(self, ids, mask):
                    return self.m(input_ids=ids, attention_mask=mask).last_hidden_state

            ids = torch.randint(0, 30522, (1, 128))
            mask = torch.ones(1, 128, dtype=torch.int64)
            export(Wrap(), (ids, mask), path, ["input_ids", "attention_mask"],
                   {"input_ids": {0: "batch"}, "attention_mask": {0: "batch"},
                    "output": {0: "batch"}})
        else:
            raise SystemExit("unknown model " + name)


if __name__ == "__main__":
    main()
