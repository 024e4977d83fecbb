"""What Lyra's container images are, apart from how they are built: pure data and file formats, read by the builder
(:mod:`lyra.images`) and by the local cluster's real nodes, which import the archives.

- :mod:`lyra.imagespec.recipe`: what goes in each image (the same recipe as the Dockerfile, held to it by a test).
- :mod:`lyra.imagespec.oci`: layers and OCI image layouts written and read from Python (tar + gzip + JSON),
  deterministic.
"""
