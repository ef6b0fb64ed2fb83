"""hgsim's live runner: trains a small model over emulated WAN links."""
