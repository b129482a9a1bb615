"""ptc_runtime.netclients and ondemand on the host's CPython: requests, urllib3 and httpx hand
whole requests to a scripted host (as `test_net.py`'s urllib does), keep their own behaviour
(redirects, cookies, gzip, JSON), and fail in their own exception types with the host's words;
a refusal is never retried. The packages are the ones the build unpacked (`build/wheels.rs`,
found under `target/`, or `PTC_ON_DEMAND_SITE`); without a build the tests are skipped.

Also `ondemand_collect` and `ondemand.Finder` over a package made here."""

import asyncio
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
import urllib.error
import urllib.request

import helpers  # noqa: F401  (puts ptc_runtime on the path)
from ptc_runtime import net, netclients, ondemand, ondemand_collect

HERE = os.path.dirname(os.path.abspath(__file__))


def _site():
    if os.environ.get("PTC_ON_DEMAND_SITE"):
        return os.environ["PTC_ON_DEMAND_SITE"]
    pattern = os.path.join(HERE, "..", "..", "..", "target", "*", "componentize-py-*", "guest-on-demand-*",
                           ondemand.MARKER)
    found = sorted(glob.glob(pattern), key=os.path.getmtime)
    return os.path.dirname(found[-1]) if found else None


SITE = _site()


class Host:
    """Answers by URL: `refused` and `slow` in the URL fail as the host would."""

    def __init__(self):
        self.requests = []

    def __call__(self, method, url, headers, body, timeout):
        self.requests.append((method, url, dict(headers), bytes(body), timeout))
        if "refused" in url:
            raise net.errors("refused", "host refused.test is not in this sandbox's network policy")
        if "slow" in url:
            raise net.errors("timed-out", f"GET {url} did not answer within 300 ms")
        if "down" in url:
            raise net.errors("failed", "connection refused by down.test")
        if url.endswith("/redirect"):
            return 302, "Found", [("Location", "https://api.test/json")], b""
        if url.endswith("/cookie"):
            return 200, "OK", [("Set-Cookie", "seen=1; Path=/")], b"ok"
        if url.endswith("/gzip"):
            return 200, "OK", [("Content-Encoding", "gzip"), ("Content-Type", "application/json")], \
                gzip.compress(b'{"gzip": true}')
        if method == "HEAD":
            return 200, "OK", [("Content-Length", "1234")], b""
        answer = {"method": method, "body": bytes(body).decode(), "cookie": dict(headers).get("Cookie")}
        return 200, "OK", [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")], \
            json.dumps(answer).encode()


@unittest.skipUnless(SITE, "the build has not unpacked the on-demand packages (cargo build -p ptc-runtime-python-wasm)")
class ClientsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ondemand.install()
        if SITE not in sys.path:
            sys.path.append(SITE)

    def setUp(self):
        self.host = Host()
        net.install(self.host)

    def test_requests_gets_posts_follows_redirects_and_keeps_cookies(self):
        import requests
        r = requests.get("https://api.test/json", headers={"Authorization": "Bearer ptc-secret-T-1"})
        self.assertEqual((r.status_code, r.json()["method"]), (200, "GET"))
        self.assertEqual(self.host.requests[-1][2]["Authorization"], "Bearer ptc-secret-T-1")
        self.assertEqual(requests.post("https://api.test/json", json={"a": 1}).json()["body"], '{"a": 1}')
        r = requests.get("https://api.test/redirect")
        self.assertEqual((r.json()["method"], len(r.history)), ("GET", 1))
        self.assertEqual(requests.get("https://api.test/gzip").json(), {"gzip": True})
        session = requests.Session()
        session.get("https://api.test/cookie")
        self.assertEqual(session.get("https://api.test/json").json()["cookie"], "seen=1")
        # A HEAD's answer keeps the length it announces.
        self.assertEqual(requests.head("https://api.test/json").headers["Content-Length"], "1234")

    def test_requests_failures_are_its_own_types_in_the_hosts_words(self):
        import requests
        cases = [("https://refused.test/", requests.exceptions.ConnectionError, "not in this sandbox's network policy"),
                 ("https://api.test/slow", requests.exceptions.ReadTimeout, "did not answer within 300 ms"),
                 ("https://down.test/", requests.exceptions.ConnectionError, "connection refused by down.test")]
        for url, kind, words in cases:
            with self.assertRaises(kind) as caught:
                requests.get(url, timeout=0.3)
            self.assertIn(words, str(caught.exception))
            self.assertNotIn("Max retries", str(caught.exception))

    def test_urllib3_does_not_retry_a_refusal(self):
        import urllib3
        with self.assertRaises(urllib3.exceptions.HTTPError) as caught:
            urllib3.request("GET", "https://refused.test/")
        self.assertEqual(type(caught.exception).__name__, "RefusedByPolicy")
        self.assertEqual(len(self.host.requests), 1)
        # A network's failure is retried as urllib3 retries it (three times by default).
        with self.assertRaises(urllib3.exceptions.MaxRetryError):
            urllib3.request("GET", "https://down.test/")
        self.assertEqual(len(self.host.requests), 5)

    def test_tls_options_and_proxies_change_nothing_and_bodies_stream(self):
        import httpx
        import requests
        for kwargs in ({"verify": False}, {"verify": "/no/such/ca.pem"}, {"proxies": {"https": "http://proxy:3128"}}):
            self.assertEqual(requests.get("https://api.test:8443/json", **kwargs).json()["method"], "GET")
            self.assertEqual(self.host.requests[-1][1], "https://api.test:8443/json", kwargs)
        with httpx.Client(verify=False, proxy="http://proxy:3128") as client:
            self.assertEqual(client.get("https://api.test/json").json()["method"], "GET")
        self.assertEqual(self.host.requests[-1][1], "https://api.test/json")
        chunks = list(requests.get("https://api.test/json", stream=True).iter_content(8))
        self.assertEqual(json.loads(b"".join(chunks))["method"], "GET")
        self.assertGreater(len(chunks), 1)
        with httpx.stream("GET", "https://api.test/json") as r:
            self.assertEqual(json.loads(b"".join(r.iter_bytes(8)))["method"], "GET")

    def test_httpx_sync_and_async(self):
        import httpx
        self.assertEqual(httpx.get("https://api.test/json").json()["method"], "GET")
        self.assertEqual(self.host.requests[-1][4], 5.0)  # httpx's own default timeout
        self.assertEqual(httpx.post("https://api.test/json", json={"b": 2}).json()["body"], '{"b":2}')
        self.assertEqual(httpx.get("https://api.test/gzip").json(), {"gzip": True})

        async def gathered():
            async with httpx.AsyncClient() as client:
                replies = await asyncio.gather(*(client.get(f"https://api.test/json?n={i}") for i in range(3)))
            return [r.json()["method"] for r in replies]

        self.assertEqual(asyncio.run(gathered()), ["GET"] * 3)
        self.assertEqual([u for _, u, *_ in self.host.requests[-3:]], [f"https://api.test/json?n={i}" for i in range(3)])

    def test_httpx_failures_are_its_own_types_in_the_hosts_words(self):
        import httpx
        cases = [("https://refused.test/", httpx.ConnectError, "not in this sandbox's network policy"),
                 ("https://api.test/slow", httpx.ReadTimeout, "did not answer within 300 ms"),
                 ("https://down.test/", httpx.ConnectError, "connection refused by down.test"),
                 ("ftp://api.test/", httpx.UnsupportedProtocol, "programs reach only http:// and https://")]
        for url, kind, words in cases:
            with self.assertRaises(kind) as caught:
                httpx.get(url)
            self.assertIn(words, str(caught.exception))


class OtherSchemesTest(unittest.TestCase):
    def test_urllib_refuses_other_schemes_in_words(self):
        net.install(Host())
        for url, words in [("ftp://example.org/f", "ftp: is not allowed by the network policy"),
                           ("file:///etc/passwd", "read a file with open(path) instead"),
                           ("gopher://example.org/", "gopher: is not allowed by the network policy")]:
            with self.assertRaises(urllib.error.URLError) as caught:
                urllib.request.urlopen(url)
            self.assertIsInstance(caught.exception.reason, net.Refused)
            self.assertIn(words, str(caught.exception.reason))
        self.assertEqual(urllib.request.urlopen("data:,fine").read(), b"fine")


PACKAGE = {
    "pkg/__init__.py": "from . import sub\nfrom .sub import VALUE\n",
    "pkg/sub.py": textwrap.dedent("""\
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            import ftplib
        VALUE = 42
        def later():
            import imaplib
            return imaplib
        """),
    "pkg/__main__.py": "raise SystemExit('never compiled')\n",
}


class CollectTest(unittest.TestCase):
    def test_a_package_runs_from_the_blob_with_its_hooks(self):
        with tempfile.TemporaryDirectory() as root:
            for name, text in PACKAGE.items():
                os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
                with open(os.path.join(root, name), "w") as f:
                    f.write(text)
            with open(os.path.join(root, ondemand.MARKER), "w") as f:
                f.write("pkg\n")
            blob = os.path.join(root, "out")
            os.makedirs(blob)
            ondemand_collect.save(ondemand_collect.site([root]), os.path.join(blob, ondemand.BLOB))
            # A process of its own, as the sandbox is: the package's files are gone, only the blob is read.
            script = textwrap.dedent(f"""\
                import shutil, sys
                sys.path.insert(0, {os.path.dirname(HERE)!r})
                from ptc_runtime import ondemand
                index, data = ondemand.load([{blob!r}])
                print(sorted(n for n in index if n.startswith("pkg")), "imaplib" in index, "ftplib" in index)
                shutil.rmtree({os.path.join(root, "pkg")!r})
                ondemand.HOOKS["pkg"] = lambda m: print("hooked", m.VALUE)
                ondemand.install((index, data))
                import pkg
                print(pkg.VALUE, pkg.__file__, pkg.sub.later().__name__)
                """)
            out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
        self.assertEqual(out.splitlines(), [
            "['pkg', 'pkg.sub'] True False",
            "hooked 42",
            "42 /site-packages/pkg/__init__.py imaplib",
        ])


if __name__ == "__main__":
    unittest.main()
