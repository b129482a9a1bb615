"""`requests`, `urllib3` and `httpx` over the host's fetch, as `urllib` is (`net.py`): the
network policy, secrets, bounds and the host's words apply to them the same way.

Each is fitted when a program first imports it (`ondemand.HOOKS`), at the extension point the
library has for it:

- urllib3 (and so requests): its pools' connection class, which urllib3 itself swaps for the
  browser's fetch under Pyodide. The connection hands the whole request to the host, and reads
  the host's response through `http.client`, as urllib3 reads a socket's. Retries, redirects,
  cookies, streaming and `Response.raw` stay the libraries' own.
- requests: `HTTPAdapter.send` gives a failure the host's words (urllib3 would wrap them in
  "Max retries exceeded ... Caused by ..."), as the same requests exception type;
  `cert_verify` accepts any `verify` (TLS is the host's, always verified; a CA bundle's file
  would not exist here).
- httpx: its default transports (`HTTPTransport`, `AsyncHTTPTransport`), so httpcore is never
  needed. The host's fetch is one blocking call: requests of an `AsyncClient` in
  `asyncio.gather` are made one after another, each whole while the loop waits.

A request the policy refuses raises at once and is not retried: `requests.ConnectionError`,
`httpx.ConnectError` or, from urllib3 itself, `urllib3.exceptions.HTTPError`, each with the
refusal's words.
"""

from . import net, ondemand

STDLIB_EXTRA = (
    # Host names beyond ASCII (IDNA), which http.client, urllib3 and httpx encode.
    "encodings.idna",
    # What the web's text is most often in besides UTF-8 and Latin-1 (which CPython decodes
    # without a module), for `response.text`; the rest of `encodings` is left out, since
    # charset_normalizer (requests' `apparent_encoding`) would import every codec it finds.
    "encodings.cp1252", "encodings.cp1251", "encodings.cp1250", "encodings.iso8859_2",
    "encodings.iso8859_15", "encodings.koi8_r", "encodings.mac_roman", "encodings.utf_8_sig",
    "encodings.utf_16", "encodings.utf_16_le", "encodings.utf_16_be", "encodings.utf_32",
    "encodings.utf_32_le", "encodings.utf_32_be", "encodings.latin_1", "encodings.ascii",
)
"""Standard-library modules the snapshot lacks that a program's requests need by name."""


def _host_error(e):
    """The host's exception behind `e` (its cause, context or urllib3 `reason`), if any."""
    seen = set()
    while e is not None and id(e) not in seen:
        if net.from_host(e):
            return e
        seen.add(id(e))
        reason = getattr(e, "reason", None)
        nested = e.args[0] if e.args and isinstance(e.args[0], BaseException) else None
        e = next((x for x in (reason, nested, e.__cause__, e.__context__) if isinstance(x, BaseException)), None)
    return None


def _seconds(timeout):
    """A number of seconds for the host, or None (the policy's own limit)."""
    return float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else None


def urllib3_fitted(urllib3):
    """Makes urllib3's pools use `HostConnection`s."""
    import http.client

    from urllib3 import connection, connectionpool, exceptions
    from urllib3.response import HTTPResponse
    from urllib3.util.request import SKIP_HEADER, body_to_chunks

    class RefusedByPolicy(exceptions.HTTPError):
        """The network policy refused the request: raised at once, never retried (urllib3
        retries what it takes for a network's failures: an `OSError`)."""

    RefusedByPolicy.__module__ = exceptions.__name__

    class HostConnection:
        """A urllib3 connection whose requests the host makes (`BaseHTTPConnection`'s face)."""

        default_port = connection.port_by_scheme["http"]
        default_socket_options = []
        scheme = "http"
        is_verified = False
        proxy_is_verified = None
        proxy = None
        proxy_config = None

        def __init__(self, host, port=None, *, timeout=None, blocksize=16384, **options):
            # source_address, socket_options, proxy, and for https cert_reqs, ca_certs,
            # ssl_context...: the host's choice, accepted and unused.
            self.host, self.port, self.timeout, self.blocksize = host, port, timeout, blocksize
            self.source_address = self.socket_options = None
            self._pending = None
            self._closed = True

        def set_tunnel(self, host, port=None, headers=None, scheme="http"):
            # Through a proxy, urllib3 connects to the proxy and tunnels to `host`: the host
            # makes the request to `host` itself (a proxy is no way out of the sandbox).
            self.host, self.port = host, port

        def connect(self):
            pass

        def request(self, method, url, body=None, headers=None, *, chunked=False, preload_content=True,
                    decode_content=True, enforce_content_length=True):
            self._closed = False
            if not url.startswith(("http://", "https://")):
                default = self.default_port
                host = f"[{self.host}]" if ":" in self.host else self.host
                netloc = host if self.port in (None, default) else f"{host}:{self.port}"
                url = f"{self.scheme}://{netloc}{url}"
            chunks = body_to_chunks(body, method=method, blocksize=self.blocksize).chunks
            data = b"".join(c.encode("utf-8") if isinstance(c, str) else bytes(c) for c in chunks or ())
            sent = [(k, v) for k, v in (headers or {}).items() if v != SKIP_HEADER]
            if not any(k.lower() == "user-agent" for k, _ in sent):
                sent.append(("User-Agent", connection._get_default_user_agent()))
            self._pending = (method, url, sent, data, preload_content, decode_content, enforce_content_length)

        def getresponse(self):
            if self._pending is None:
                raise http.client.ResponseNotReady()
            (method, url, headers, body, preload, decode, enforce), self._pending = self._pending, None
            try:
                raw = net.response(method, url, headers, body, _seconds(self.timeout))
            except net.Refused as e:
                raise RefusedByPolicy(str(e)) from e
            return HTTPResponse(
                body=raw, headers=urllib3.HTTPHeaderDict(raw.msg.items()), status=raw.status, version=11,
                version_string="HTTP/1.1", reason=raw.reason, preload_content=preload, decode_content=decode,
                original_response=raw, enforce_content_length=enforce, request_method=method,
                request_url=url, connection=self,
            )

        def close(self):
            self._closed = True
            self._pending = None

        @property
        def is_closed(self):
            return self._closed

        @property
        def is_connected(self):
            return not self._closed

        @property
        def has_connected_to_proxy(self):
            return False

    class HostHTTPSConnection(HostConnection):
        default_port = connection.port_by_scheme["https"]
        scheme = "https"
        is_verified = True  # by the host, always: no InsecureRequestWarning
        cert_reqs = ca_certs = ca_cert_dir = ca_cert_data = ssl_version = None
        ssl_minimum_version = ssl_maximum_version = assert_fingerprint = None

        def set_cert(self, *args, **kwargs):
            pass

    connectionpool.HTTPConnectionPool.ConnectionCls = HostConnection
    connectionpool.HTTPSConnectionPool.ConnectionCls = HostHTTPSConnection
    connection.HTTPConnection = HostConnection
    connection.HTTPSConnection = connection.VerifiedHTTPSConnection = HostHTTPSConnection
    exceptions.RefusedByPolicy = RefusedByPolicy


def requests_fitted(requests):
    """Gives requests' failures the host's words; TLS options are the host's."""
    from requests import adapters, exceptions
    from urllib3.exceptions import RefusedByPolicy

    send = adapters.HTTPAdapter.send

    def host_send(self, request, *args, **kwargs):
        try:
            return send(self, request, *args, **kwargs)
        except RefusedByPolicy as e:
            raise exceptions.ConnectionError(str(e), request=request) from None
        except exceptions.RequestException as e:
            host = _host_error(e)
            if host is None:
                raise
            raise type(e)(str(host), request=request) from None

    def cert_verify(self, conn, url, verify, cert):
        """TLS is the sandbox host's, which always verifies (with its operator's CAs)."""

    host_send.__doc__ = send.__doc__
    adapters.HTTPAdapter.send = host_send
    adapters.HTTPAdapter.cert_verify = cert_verify


def httpx_fitted(httpx):
    """Makes the host httpx's default transport."""

    def exchange(request, body):
        if request.url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(net.other_scheme(request.url.scheme), request=request)
        timeouts = request.extensions.get("timeout") or {}
        limits = [t for t in timeouts.values() if isinstance(t, (int, float))]
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        try:
            status, reason, rheaders, rbody = net.fetch(
                request.method, str(request.url), headers, body, max(limits) if limits else None)
        except TimeoutError as e:  # the host's: net.fetch raises nothing else of these
            raise httpx.ReadTimeout(str(e), request=request) from None
        except (net.Refused, ConnectionError) as e:
            raise httpx.ConnectError(str(e), request=request) from None
        return httpx.Response(
            status, headers=rheaders, stream=httpx.ByteStream(bytes(rbody)),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason.encode("latin-1", "replace")},
        )

    class HostTransport(httpx.BaseTransport):
        """httpx's transport over the sandbox host's fetch (TLS, proxies, limits and retries
        are the host's and the network policy's: the options are accepted and unused)."""

        def __init__(self, *args, **kwargs):
            pass

        def handle_request(self, request):
            return exchange(request, request.read())

    class AsyncHostTransport(httpx.AsyncBaseTransport):
        """The same for `AsyncClient`: each request is one blocking call into the host."""

        def __init__(self, *args, **kwargs):
            pass

        async def handle_async_request(self, request):
            return exchange(request, await request.aread())

    from httpx import _client, _transports
    from httpx._transports import default
    for module in (httpx, _client, _transports, default):
        module.HTTPTransport = HostTransport
        module.AsyncHTTPTransport = AsyncHostTransport


ondemand.HOOKS.update({"urllib3": urllib3_fitted, "requests": requests_fitted, "httpx": httpx_fitted})
# urllib3 checks `ssl.OPENSSL_VERSION` when imported and warns that the stand-in is not
# OpenSSL, which the program's output would show; TLS is the host's (rustls).
ondemand.QUIET["urllib3"] = "urllib3 v2 only supports OpenSSL"
