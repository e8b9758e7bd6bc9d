"""Built-in cluster-environment plugins, one module per launcher; each is an ordinary plugin."""
