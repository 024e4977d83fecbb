"""Lyra's container images, built without a container engine (``make image``, ``lyra image build``).

What the images are (their recipes, the OCI layout) is :mod:`lyra.imagespec`, which the local cluster's real nodes
read too; this package builds and checks them, with the binary cache's tools:

- :mod:`lyra.images.build`: the builder and its cache (base filesystem by mmdebstrap, the locked venv by uv).
- :mod:`lyra.images.verify`: imports the archives into a private containerd and runs each image once.
"""
