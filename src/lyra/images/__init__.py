"""Lyra's container images, built without a container engine (``make image``, ``lyra image build``).

- :mod:`lyra.images.recipe`: what goes in each image (the same recipe as the Dockerfile, held to it by a test).
- :mod:`lyra.images.oci`: layers and OCI image layouts written from Python (tar + gzip + JSON), deterministic.
- :mod:`lyra.images.build`: the builder and its cache (base filesystem by mmdebstrap, the locked venv by uv).
- :mod:`lyra.images.verify`: imports the archives into a private containerd and runs each image once.
"""
