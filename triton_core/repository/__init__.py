"""Model repositories: Triton's folder layout, versions, and the models loaded from them."""
