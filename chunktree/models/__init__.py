"""Embedders: model descriptions, ONNX graphs built from bundled weights, onnxruntime sessions, export."""
