"""Sources of the fake vendor packages. Test code only.

`accelbackends.testing.FakeStack` copies the packages wanted into a directory that goes
on a child process's ``PYTHONPATH``, beside their installed-package metadata; they are never
imported from here. ``sitecustomize`` patches torch into a fake XPU build where asked.
"""
