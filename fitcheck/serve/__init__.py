"""`fitcheck serve`: the answers of the command line in a web page, served by fitcheck itself (standard library
only: :mod:`http.server`).

    fitcheck.serve.api      pure functions from a request's path and query to (status, content type, body): every
                            document is the one the matching command prints with --json, built by the same code
    fitcheck.serve.server   the HTTP edge: the handler, its limits, the workers, the static files of the page
    fitcheck/serve/static/  the page itself (index.html and what it loads)

The server answers only: it reads the catalog, the hardware profiles, this machine (probed once at start, the RAM
bench off) and the local Hugging Face cache and Ollama store, never the network, and writes nothing.
"""
