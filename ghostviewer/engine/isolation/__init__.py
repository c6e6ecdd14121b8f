"""Isolating one module of a run: its real inputs and weights on disk, rebuilt without the pipeline, fuzzed.

`arguments` encodes call arguments (tensors to safetensors, the rest to JSON), `outputs` summarises outputs,
`constructors` and `rebuild` recreate a module from its diffusers class, `injected` carries ghost-lab faults
into the isolated module, `folder` reads an isolated folder back, `repro_text` writes its standalone repro.
"""
