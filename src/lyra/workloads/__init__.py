"""Small demo workloads for real nodes (their images: ``lyra image build``): a training worker that checkpoints and
honours SIGTERM, and an inference replica that serves HTTP with a readiness endpoint.

Each is one standalone file using the standard library only (an import-linter contract holds this), so its image is
the Debian base with Python 3.11 plus that single file.
"""
