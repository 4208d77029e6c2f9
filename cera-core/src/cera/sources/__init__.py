"""Where models come from: local paths, cera's bundles (`bundles`), Hugging Face repos
(`hub`), and SafeTensors repos converted to GGUF on the way (`convert`, with the block
quantizers in `quants`)."""
