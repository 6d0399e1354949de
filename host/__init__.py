"""The host side: graph tools, blocks and model, device interface and driver, backends, training, CLI."""
