"""Floor 1, the host: the runtime accelbackends itself runs on, which plugins never import.

These modules sit above `accelbackends.plugin` (they use its errors) and below everything that
runs a job or a command; the built-in plugins (``accelerators/``, ``environments/``) and the
third-party ones reach accelbackends only through `accelbackends.plugin`, so none of this is
under the plugin layer's stability promise.

- `guard`: the one runner for foreign or blocking code with a deadline, and the record of the
  threads it gave up on.
- `workers`: waiting for torch's backend worker threads before the interpreter finalises.
- `torchload`: importing torch where a device extension it loads by itself cannot load.
- `torchfeatures`: whether the installed torch has ``torch.distributed`` and which backends it
  was built with, read from its build files without importing it.

Nothing is imported here: each reader imports the module it needs.
"""
