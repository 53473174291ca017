"""An example triton-core backend plugin: a linear layer ``y = x @ weight + bias`` in numpy.

A model is one JSON file (``model.json``) that names its input and output and holds the
weights; the backend completes the model's config from it (inputs, outputs, max_batch_size,
dynamic batching) and runs each batch of requests as one matrix product.
"""

from __future__ import annotations
