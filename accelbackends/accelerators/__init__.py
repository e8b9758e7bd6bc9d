"""Built-in accelerator plugins, one module each; each is an ordinary plugin."""
