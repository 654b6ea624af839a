"""``poolkit export-onnx``: a whole embedder as one ONNX graph, served without torch (poolkit.models.onnx_graph)."""

from __future__ import annotations

import argparse

from ..settings import config_from
from ..training.config import EXPORT_PRESETS, ExportConfig
from .common import add_pooler_arguments, add_trust_remote_code_argument
from .options import add_config_arguments, given_settings

HELP = "export encoder + pooler (+ Dense / Normalize, dim) as one ONNX graph, served by onnxruntime alone"
DESCRIPTION = ("Export an embedder whole, from token ids and attention mask to its final vectors: the encoder, the "
               "pooler with its trained weights (--model RUN/fold_K) or a parameter-free one (--pooler), the Dense and "
               "Normalize modules a sentence-transformers folder declares (--pooler auto, the default there), --dim "
               "and --normalize. OUT gets model.onnx (dynamic batch and sequence axes), model-int8.onnx with --int8, "
               "the tokenizer's files and poolkit-onnx.json (opset, versions, settings, how to tokenise, and the parity "
               "with torch measured at export). onnxruntime and the tokenizers package alone reproduce the vectors.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="encoder folder / hub name (default: packaged all-MiniLM-L6-v2), or a "
                        "`poolkit train` model: a fold_K folder (its trained pooler is exported)")
    add_pooler_arguments(parser, default=None)
    parser.add_argument("--out", required=True, help="the folder to write (it must not exist, or be an earlier "
                        "export replaced with --force)")
    add_config_arguments(parser.add_argument_group("graph (poolkit.training.config.ExportConfig; unset: its "
                                                   "defaults)"), EXPORT_PRESETS)
    add_trust_remote_code_argument(parser)
    parser.add_argument("--force", action="store_true", help="replace an earlier export in --out")


def run(args: argparse.Namespace) -> int:
    from ..models.encoders import embedding_model
    from ..models.text_encoder import export_onnx
    from .common import encoder_pooler

    config = config_from(ExportConfig, "export", given_settings(args, EXPORT_PRESETS))
    config.check()
    options = {**config.encoder_options(), "normalize": config.normalize}
    manifest = export_onnx(args.out, embedding_model(args.model), encoder_pooler(args), int8=config.int8,
                           force=args.force, trust_remote_code=args.trust_remote_code, **options)
    parity = manifest["parity"]["max_abs_diff_to_torch"]
    int8 = manifest.get("int8")
    extra = (f"; model-int8.onnx: cosine to float32 {int8['cosine_to_float32']['mean']:.4f} mean, "
             f"{int8['cosine_to_float32']['min']:.4f} lowest" if int8 else "")
    print(f"exported {manifest['pooling']} pooling ({manifest['dim']} dimensions, opset {manifest['opset']}) to "
          f"{args.out} in {manifest['export_seconds']:.1f} s; max |diff| to torch {parity:.2e} on "
          f"{manifest['parity']['texts']} texts{extra}")
    return 0
