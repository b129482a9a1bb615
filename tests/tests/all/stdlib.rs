//! The preloaded standard library works in the sandbox; what is outside it fails clearly.

use ptc_tests::*;

#[tokio::test]
async fn documented_stdlib_modules_import_and_work() {
    let code = r#"
import json, re, datetime, math, statistics, decimal, fractions, collections, itertools
import functools, random, csv, io, textwrap, string, base64, hashlib, hmac, uuid, typing
import dataclasses, enum, heapq, bisect, operator, copy, pprint, difflib, html, urllib.parse
import zoneinfo, zlib, gzip, struct, unicodedata, ipaddress, graphlib, tomllib, pickle
import xml.etree.ElementTree as ET
print(statistics.mean([1, 2, 3]), decimal.Decimal("1.10") + decimal.Decimal("2.20"))
print(hashlib.sha256(b"abc").hexdigest()[:16], base64.b64encode(b"hi").decode())
print(len(str(uuid.uuid4())), ET.fromstring("<a><b>x</b></a>").find("b").text)
print(zlib.decompress(zlib.compress(b"z" * 100)) == b"z" * 100, tomllib.loads("a = 1")["a"], pickle.loads(pickle.dumps([1]))[0])
print(datetime.date(2024, 2, 29).isoformat(), urllib.parse.urlparse("http://h/p?q=1").query)
print(list(graphlib.TopologicalSorter({"b": {"a"}}).static_order()))
print(datetime.datetime.now(datetime.timezone.utc).year >= 2024)
"#;
    let done = run_code(code).await.completed();
    assert_eq!(done.stdout, "2 3.30\nba7816bf8f01cfea aGk=\n36 x\nTrue 1 1\n2024-02-29 q=1\n['a', 'b']\nTrue\n");
}

#[tokio::test]
async fn modules_outside_the_list_fail_with_module_not_found() {
    let f = run_code("import socket_server_that_does_not_exist").await.failed();
    assert!(f.message.starts_with("ModuleNotFoundError"), "{}", f.message);
    let f = run_code("import numpy").await.failed();
    assert!(f.message.starts_with("ModuleNotFoundError: No module named 'numpy'"), "{}", f.message);
}

#[tokio::test]
async fn no_network_and_no_host_files() {
    let code = r#"
import os
try:
    print(os.listdir("/"))
except OSError as e:
    print("no fs:", type(e).__name__)
print(open.__name__)
try:
    open("/etc/passwd").read()
except OSError as e:
    print("no passwd:", type(e).__name__)
"#;
    let out = run_code(code).await.completed().stdout;
    assert!(out.contains("no passwd: "), "{out}");
    assert!(!out.contains("root:"), "{out}");
}

/// The build made the snapshot's objects immortal (`runtime-python-wasm/build/immortal.rs`): a
/// program served by the real server finds the preloaded modules and their functions immortal,
/// and its own objects not.
#[tokio::test]
async fn the_snapshots_objects_are_immortal_and_a_programs_are_not() {
    use ptc_tests::grpc::{config, serve};
    let server = serve(config(&[])).await;
    let code = "import json, sys\nclass Mine: pass\n\
                print(sys._is_immortal(json), sys._is_immortal(json.dumps), sys._is_immortal(Mine()))";
    let r = ptc_tests::http::post(server.http_addr, "/exec", None, &serde_json::json!({"code": code})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["stdout"], "True True False\n", "{}", r.text);
}

/// The snapshot's free memory was taken before it was sealed (`ptc_runtime/heap.py`): a
/// program's new objects lie side by side in fresh pages, instead of one on each of the
/// snapshot's pages, which each instance would copy (2,000 `bytes(8)` touched 798 pages
/// before, 19 after).
#[tokio::test]
async fn a_programs_objects_lie_side_by_side_not_over_the_snapshots_pages() {
    use ptc_tests::grpc::{config, serve};
    let server = serve(config(&[])).await;
    let code = "held = [bytes(8) for _ in range(2000)]\nprint(len({id(o) >> 12 for o in held}))";
    let r = ptc_tests::http::post(server.http_addr, "/exec", None, &serde_json::json!({"code": code})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let pages: usize = r.body["stdout"].as_str().unwrap().trim().parse().unwrap();
    assert!(pages < 100, "2,000 small objects on {pages} pages");
}
