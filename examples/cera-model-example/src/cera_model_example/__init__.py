"""An example cera model family for the made-up GGUF architecture "cera-example".

`plugin` registers it (cheap, imported by `cera plugins`); `model` is the model itself
(imported only when a file of this architecture is loaded); `tiny` writes a small
random-weight GGUF file of this architecture for tests and experiments.
"""
