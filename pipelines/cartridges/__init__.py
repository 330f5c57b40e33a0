"""Cartridges: self-study data and the train_cartridge job (see docs/cartridges.md)."""
