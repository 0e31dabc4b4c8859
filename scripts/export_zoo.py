#!/usr/bin/env python3
"""export_zoo.py - the model zoo made as users make it: each model built from
its library's own class with random weights (fixed seed) and exported through
its own forward by both torch.onnx exporters (TorchScript: dynamo=False, and
dynamo=True), at opset 17 and at the newest opset each exporter writes, with
masks passed as inputs where the model takes them.

  --size small   two layers, narrow (hidden 32): the files kept in
                 tests/models/zoo/ that CI checks on the CPU
  --size full    the libraries' default configurations (BERT-base, GPT-2 ...)
                 for bench/gpu/zoo.py

Needs torch, transformers (and torchvision, onnxscript for the dynamo
exporter); it runs on the GPU machine, where they are installed. Each export
that fails is listed with its error in the manifest (manifest.json beside the
files) and the next goes on. Batch and sequence (or image) dims are dynamic.

Usage: python3 scripts/export_zoo.py --size small --out DIR [--models a,b]
"""
import argparse
import json
import os
import sys
import traceback

import torch

SEED = 20261202


def text_inputs(batch, seq, vocab, mask=True):
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    if not mask:
        return {"input_ids": ids}
    am = torch.ones(batch, seq, dtype=torch.int64)
    am[0, seq - seq // 4:] = 0  # a padded row: the mask has to mean something
    return {"input_ids": ids, "attention_mask": am}


class Hidden(torch.nn.Module):
    """The model's own forward, keeping only last_hidden_state (a tuple of
    outputs or a ModelOutput otherwise becomes many ONNX outputs)."""

    def __init__(self, m, names):
        super().__init__()
        self.m = m
        self.names = names

    def forward(self, *args):
        out = self.m(**dict(zip(self.names, args)))
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


class LlamaWithPast(torch.nn.Module):
    """A decoder step with past key/values as graph inputs and the present
    ones as outputs (what an exported KV-cache decoder looks like)."""

    def __init__(self, m, layers):
        super().__init__()
        self.m = m
        self.layers = layers

    def forward(self, input_ids, attention_mask, *past):
        from transformers import DynamicCache
        cache = DynamicCache()
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.m(input_ids=input_ids, attention_mask=attention_mask,
                     past_key_values=cache, use_cache=True)
        pkv = out.past_key_values
        res = [out.last_hidden_state]
        for i in range(self.layers):
            if hasattr(pkv, "layers"):
                res += [pkv.layers[i].keys, pkv.layers[i].values]
            else:
                res += [pkv.key_cache[i], pkv.value_cache[i]]
        return tuple(res)


def text_cfg(small, **full_overrides):
    if small:
        base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, vocab_size=256, max_position_embeddings=64)
    else:
        base = {}
    base.update(full_overrides if not small else {})
    return base


def make(name, small):
    """(module, {input name: example tensor}, dynamic dims {name: {axis: label}}, output names)"""
    import transformers as tf
    torch.manual_seed(SEED)
    B, S = 2, 16
    text_dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    if name in ("bert", "roberta", "distilbert"):
        if name == "distilbert":
            kw = dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, vocab_size=256,
                      max_position_embeddings=64) if small else {}
            cfg = tf.DistilBertConfig(**kw)
            m = tf.DistilBertModel(cfg)
        elif name == "roberta":
            kw = text_cfg(small)
            if small:
                kw["max_position_embeddings"] = 80
            cfg = tf.RobertaConfig(**kw)
            m = tf.RobertaModel(cfg)
        else:
            cfg = tf.BertConfig(**text_cfg(small))
            m = tf.BertModel(cfg)
        ins = text_inputs(B, S, cfg.vocab_size)
        return Hidden(m, list(ins)), ins, text_dyn, ["last_hidden_state"]
    if name == "gpt2":
        kw = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=256, n_positions=64) if small else {}
        cfg = tf.GPT2Config(**kw)
        m = tf.GPT2Model(cfg)
        ins = text_inputs(B, S, cfg.vocab_size)
        return Hidden(m, list(ins)), ins, text_dyn, ["last_hidden_state"]
    if name == "t5_encoder":
        kw = dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=256) if small else {}
        cfg = tf.T5Config(**kw)
        m = tf.T5EncoderModel(cfg)
        ins = text_inputs(B, S, cfg.vocab_size)
        return Hidden(m, list(ins)), ins, text_dyn, ["last_hidden_state"]
    if name == "clip_text":
        kw = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  vocab_size=256, max_position_embeddings=64) if small else {}
        cfg = tf.CLIPTextConfig(**kw)
        m = tf.CLIPTextModel(cfg)
        ins = text_inputs(B, S, cfg.vocab_size)
        return Hidden(m, list(ins)), ins, text_dyn, ["last_hidden_state"]
    if name in ("vit", "clip_vision"):
        img = 32 if small else 224
        if name == "vit":
            kw = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                      image_size=img, patch_size=8) if small else {}
            cfg = tf.ViTConfig(**kw)
            m = tf.ViTModel(cfg, add_pooling_layer=False)
        else:
            kw = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                      image_size=img, patch_size=8) if small else {}
            cfg = tf.CLIPVisionConfig(**kw)
            m = tf.CLIPVisionModel(cfg)
        x = torch.randn(B, 3, img, img, generator=torch.Generator().manual_seed(SEED))
        return Hidden(m, ["pixel_values"]), {"pixel_values": x}, {"pixel_values": {0: "batch"}}, \
            ["last_hidden_state"]
    if name == "whisper_encoder":
        kw = dict(d_model=32, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64,
                  decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=64, num_mel_bins=16,
                  max_source_positions=32, max_target_positions=32, vocab_size=256, pad_token_id=0,
                  bos_token_id=1, eos_token_id=2, decoder_start_token_id=1) if small else {}
        cfg = tf.WhisperConfig(**kw)
        m = tf.WhisperModel(cfg).get_encoder()
        x = torch.randn(B, cfg.num_mel_bins, 2 * cfg.max_source_positions,
                        generator=torch.Generator().manual_seed(SEED))
        return Hidden(m, ["input_features"]), {"input_features": x}, {"input_features": {0: "batch"}}, \
            ["last_hidden_state"]
    if name in ("llama", "llama_past"):
        kw = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, vocab_size=256, max_position_embeddings=128) if small else \
            dict(hidden_size=1024, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=4,
                 intermediate_size=2816, vocab_size=32000)  # about 0.2 B parameters: under protobuf's 2 GB
        cfg = tf.LlamaConfig(**kw)
        m = tf.LlamaModel(cfg)
        if name == "llama":
            ins = text_inputs(B, S, cfg.vocab_size)
            return Hidden(m, list(ins)), ins, text_dyn, ["last_hidden_state"]
        P = 8
        ins = text_inputs(B, S, cfg.vocab_size)
        ins["attention_mask"] = torch.ones(B, P + S, dtype=torch.int64)
        hd = cfg.hidden_size // cfg.num_attention_heads
        g = torch.Generator().manual_seed(SEED + 1)
        dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"}}
        outs = ["last_hidden_state"]
        for i in range(cfg.num_hidden_layers):
            for kv in ("key", "value"):
                ins[f"past_{kv}_{i}"] = torch.randn(B, cfg.num_key_value_heads, P, hd, generator=g)
                dyn[f"past_{kv}_{i}"] = {0: "batch", 2: "past"}
                outs.append(f"present_{kv}_{i}")
        return LlamaWithPast(m, cfg.num_hidden_layers), ins, dyn, outs
    if name == "tvs_vit":
        # torchvision's own VisionTransformer (nn.MultiheadAttention inside:
        # sequence-first packed in_proj, Q/K/V taken by select), small config
        import torchvision
        kw = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64,
                  mlp_dim=128, num_classes=10) if small else \
            dict(image_size=224, patch_size=16, num_layers=12, num_heads=12, hidden_dim=768,
                 mlp_dim=3072)
        m = torchvision.models.VisionTransformer(**kw)
        # its classifier starts at zero (a constant output checks nothing)
        torch.nn.init.normal_(m.heads.head.weight, std=0.5)
        torch.nn.init.normal_(m.heads.head.bias, std=0.5)
        img = kw["image_size"]
        x = torch.randn(B, 3, img, img, generator=torch.Generator().manual_seed(SEED))
        return m, {"input": x}, {"input": {0: "batch"}}, ["output"]
    if name == "tvs_swin":
        # torchvision's own Swin class, small: 64x64 images give 16x16 then
        # 8x8 feature maps over 4x4 windows, so both stages have shifted
        # windows (16 and 4 of them): 4 attention layers, 2 with window masks
        from torchvision.models.swin_transformer import SwinTransformer
        img = 64 if small else 224
        m = SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                            window_size=[4, 4], num_classes=10) if small else \
            SwinTransformer(patch_size=[4, 4], embed_dim=96, depths=[2, 2, 6, 2],
                            num_heads=[3, 6, 12, 24], window_size=[7, 7])
        x = torch.randn(B, 3, img, img, generator=torch.Generator().manual_seed(SEED))
        return m, {"input": x}, {"input": {0: "batch"}}, ["output"]
    if name.startswith("tv_"):
        import torchvision
        m = getattr(torchvision.models, name[3:])(weights=None)
        x = torch.randn(B, 3, 224, 224, generator=torch.Generator().manual_seed(SEED))
        return m, {"input": x}, {"input": {0: "batch"}}, ["output"]
    raise ValueError(name)


TEXT = ["bert", "roberta", "distilbert", "gpt2", "t5_encoder", "vit", "clip_text", "clip_vision",
        "whisper_encoder", "llama", "llama_past"]
TEXT += ["tvs_vit"]  # torchvision's ViT class at a small config
TEXT.append("tvs_swin")  # torchvision's Swin at a small config (shifted-window masks)
VISION = ["tv_resnet50", "tv_mobilenet_v3_large", "tv_efficientnet_b0", "tv_convnext_tiny",
          "tv_regnet_y_800mf", "tv_swin_t", "tv_vit_b_16"]
# (exporter, opset): 17 and the newest each writes
EXPORTS = [("torchscript", 17), ("torchscript", 20), ("dynamo", 17), ("dynamo", 23)]


def export(mod, ins, dyn, outs, exporter, opset, path):
    args = tuple(ins.values())
    names = list(ins)
    if exporter == "torchscript":
        dyn_axes = {k: v for k, v in dyn.items()}
        for i, o in enumerate(outs):
            dyn_axes[o] = {0: "batch"}
        torch.onnx.export(mod, args, path, dynamo=False, opset_version=opset, input_names=names,
                          output_names=outs, dynamic_axes=dyn_axes, do_constant_folding=True)
    else:
        from torch.export import Dim
        shapes = tuple({ax: Dim.AUTO for ax in dyn.get(n, {})} or None for n in names)
        # dynamic_shapes follows forward's signature: *args is one tuple
        if isinstance(mod, Hidden):
            shapes = (shapes,)
        elif isinstance(mod, LlamaWithPast):
            shapes = (shapes[0], shapes[1], shapes[2:])
        prog = torch.onnx.export(mod, args, dynamo=True, opset_version=opset, input_names=names,
                                 output_names=outs, dynamic_shapes=shapes, optimize=True,
                                 external_data=False)
        prog.save(path, external_data=False)
    import onnx
    mp = onnx.load(path)
    onnx.checker.check_model(mp)
    ops = {}
    for n in mp.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return {"opset": [o.version for o in mp.opset_import if o.domain in ("", "ai.onnx")][0],
            "inputs": [[i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim],
                        i.type.tensor_type.elem_type] for i in mp.graph.input],
            "nodes": len(mp.graph.node), "ops": ops, "bytes": os.path.getsize(path)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=["small", "full"], default="small")
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="")
    ap.add_argument("--exports", default="", help="e.g. torchscript:17,dynamo:23")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    models = a.models.split(",") if a.models else (TEXT if a.size == "small" else TEXT + VISION)
    exports = [(e.split(":")[0], int(e.split(":")[1])) for e in a.exports.split(",")] if a.exports \
        else EXPORTS
    import transformers
    manifest = {"seed": SEED, "size": a.size, "torch": torch.__version__,
                "transformers": transformers.__version__, "models": {}}
    try:
        import onnxscript
        manifest["onnxscript"] = onnxscript.__version__
    except ImportError:
        pass
    for name in models:
        for exporter, opset in exports:
            key = f"{name}.{exporter}{opset}"
            path = os.path.join(a.out, key + ".onnx")
            try:
                mod, ins, dyn, outs = make(name, a.size == "small")
                mod.eval()
                # nn.MultiheadAttention's inference fast path (eval + no_grad,
                # torchvision's ViT) is one aten op the TorchScript exporter
                # cannot write; users turn it off to export, and so does this
                if hasattr(torch.backends, "mha"):
                    torch.backends.mha.set_fastpath_enabled(False)
                with torch.no_grad():
                    info = export(mod, ins, dyn, outs, exporter, opset, path)
                info["ok"] = True
                print(f"{key}: {info['nodes']} nodes, opset {info['opset']}, {info['bytes']} bytes",
                      flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is recorded and the zoo goes on
                info = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:400]}"}
                print(f"{key}: FAILED {info['error']}", flush=True)
                traceback.print_exc(limit=3)
                if os.path.exists(path):
                    os.remove(path)
            manifest["models"][key] = info
            with open(os.path.join(a.out, "manifest.json"), "w") as f:
                json.dump(manifest, f, indent=1, sort_keys=True)
    ok = sum(1 for v in manifest["models"].values() if v["ok"])
    print(f"exported {ok} of {len(manifest['models'])}")


if __name__ == "__main__":
    sys.exit(main())
