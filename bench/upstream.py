"""The benchmarks' fake upstream: tests.fake_upstream with TCP_NODELAY on its connections.

tests.fake_upstream writes the response headers and the body in two sends; on a keep-alive
connection Nagle's algorithm then holds the body until the client's delayed ACK (~40 ms on Linux),
so every call would take 40 ms more than the upstream's configured latency. Same arguments:

    python -m bench.upstream --port 0 --latency 1 [--image-bytes 4000000]
"""

from tests import fake_upstream

fake_upstream.Handler.disable_nagle_algorithm = True  # socketserver.StreamRequestHandler sets TCP_NODELAY

if __name__ == "__main__":
    fake_upstream.main()
