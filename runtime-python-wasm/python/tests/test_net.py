"""ptc_runtime.net on the host's CPython: http.client's connections (and urllib's) hand whole
requests to a scripted host and read its responses back, with urllib following redirects as
new requests and the host's refusals arriving as URLError with its words."""

import http.client
import json
import os
import unittest
import urllib.error
import urllib.request

import helpers  # noqa: F401  (puts ptc_runtime on the path)
from ptc_runtime import net


class Host:
    """Answers each request from `pages` (url -> (status, headers, body)); records them."""

    def __init__(self, pages):
        self.pages = pages
        self.requests = []

    def __call__(self, method, url, headers, body, timeout):
        self.requests.append((method, url, dict(headers), bytes(body), timeout))
        page = self.pages.get(url)
        if page is None:
            raise net.errors("refused", f"host of {url} is not in this sandbox's network policy")
        if page == "slow":
            raise net.errors("timed-out", f"{url} did not answer")
        status, headers, body = page
        return status, "OK" if status == 200 else "Found", headers, body


class NetTest(unittest.TestCase):
    def use(self, pages):
        host = Host(pages)
        net.install(host)
        return host

    def test_urllib_gets_posts_and_follows_redirects_through_the_host(self):
        host = self.use({
            "https://api.test/a": (302, [("Location", "https://api.test/b")], b""),
            "https://api.test/b": (200, [("Content-Type", "application/json")], b'{"ok": true}'),
            "http://api.test:8080/post": (200, [], b"posted"),
        })
        with urllib.request.urlopen("https://api.test/a", timeout=5) as r:
            self.assertEqual((r.status, r.headers["Content-Type"], json.loads(r.read())), (200, "application/json", {"ok": True}))
        self.assertEqual([u for _, u, *_ in host.requests], ["https://api.test/a", "https://api.test/b"])
        self.assertEqual(host.requests[0][4], 5)
        req = urllib.request.Request("http://api.test:8080/post", data=b"x=1", method="POST")
        self.assertEqual(urllib.request.urlopen(req).read(), b"posted")
        method, _, headers, body, _ = host.requests[-1]
        self.assertEqual((method, body, headers["Content-Type"]), ("POST", b"x=1", "application/x-www-form-urlencoded"))

    def test_http_client_sends_chunked_bodies_and_reads_headers(self):
        host = self.use({"https://api.test/up": (200, [("X-Id", "7"), ("Transfer-Encoding", "chunked")], b"done")})
        c = http.client.HTTPSConnection("api.test")
        c.request("PUT", "/up", body=iter([b"ab", b"cd"]), encode_chunked=True)
        r = c.getresponse()
        self.assertEqual((r.status, r.getheader("X-Id"), r.read()), (200, "7", b"done"))
        self.assertEqual(host.requests[-1][3], b"abcd")
        # The connection takes another request, as a real one does after a response.
        c.request("PUT", "/up", body=b"ef")
        self.assertEqual(c.getresponse().read(), b"done")

    def test_the_hosts_refusals_and_timeouts_keep_their_words(self):
        self.use({"https://api.test/slow": "slow"})
        with self.assertRaises(urllib.error.URLError) as refused:
            urllib.request.urlopen("https://elsewhere.test/")
        self.assertIsInstance(refused.exception.reason, net.Refused)
        self.assertIn("not in this sandbox's network policy", str(refused.exception.reason))
        with self.assertRaises(urllib.error.URLError) as slow:
            urllib.request.urlopen("https://api.test/slow")
        self.assertIsInstance(slow.exception.reason, TimeoutError)

    def test_the_environment_is_set_per_program(self):
        net.environment([("TOKEN", "ptc-secret-TOKEN-abc")])
        self.assertEqual(os.environ["TOKEN"], "ptc-secret-TOKEN-abc")
        net.environment([])
        self.assertNotIn("TOKEN", os.environ)

    def test_the_ssl_stand_in_accepts_what_programs_do_with_contexts(self):
        ssl = net._ssl_module()
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.load_verify_locations("/nowhere")
        self.assertTrue(issubclass(ssl.SSLError, OSError))


if __name__ == "__main__":
    unittest.main()
