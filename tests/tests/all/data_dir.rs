//! A request's data directory is the sandbox's `/mnt/data`, read-write, and nothing escapes it.

use ptc_engine::ExecutionRequest;
use ptc_tests::*;

#[tokio::test]
async fn mnt_data_is_the_requests_directory_and_nothing_escapes_it() {
    let (root, dir) = data_dir_beside_a_secret("data-dir");
    std::fs::write(dir.join("input.csv"), "a,b\n1,2\n").unwrap();
    let code = r#"
import csv, os
rows = list(csv.DictReader(open("/mnt/data/input.csv")))
print(rows)
with open("/mnt/data/out.txt", "w") as f:
    f.write("written in the sandbox")
os.makedirs("/mnt/data/sub", exist_ok=True)
open("/mnt/data/sub/x.json", "w").write("{}")
for path in ["/mnt/data/../secret.txt", "/mnt/secret.txt", "/mnt/data/sub/../../secret.txt", "/etc/passwd"]:
    try:
        open(path).read()
        print("READ", path)
    except OSError as e:
        print("refused", path, type(e).__name__)
print(sorted(os.listdir("/mnt/data")))
"#;
    let request = ExecutionRequest::new(code).with_data_dir(dir.clone());
    let exec = engine().start(request).await.unwrap();
    let out = drive(exec, echo).await.completed().stdout;
    assert!(out.starts_with("[{'a': '1', 'b': '2'}]\n"), "{out}");
    assert!(!out.contains("READ"), "{out}");
    assert_eq!(out.matches("refused").count(), 4, "{out}");
    assert!(out.ends_with("['input.csv', 'out.txt', 'sub']\n"), "{out}");
    assert_eq!(std::fs::read_to_string(dir.join("out.txt")).unwrap(), "written in the sandbox");
    assert_eq!(std::fs::read_to_string(root.join("secret.txt")).unwrap(), "do not read");
    std::fs::remove_dir_all(&root).unwrap();
}
