"""cera backend for Qualcomm Hexagon NPUs (HTP) through QNN (onnxruntime's QNN execution
provider): graphs lowered to float16 ONNX, compiled to HTP context binaries that are cached
per model file, SoC and graph, run on the NPU or on QNN's x86-64 simulator."""
