"""The models and the tier the service runs: the embedder and its fair scheduler, the bundled local
chat model, the inference tier's client and the key it shares with the tier."""
