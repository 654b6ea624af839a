"""What runs an encoder + pooler (light to import: the CLI's settings read it to build their flags)."""

#: torch, or ONNX Runtime on the whole embedder exported into one graph (float32, or its weights in int8)
BACKENDS = ("torch", "onnx", "onnx-int8")
INT8_BACKEND = "onnx-int8"
