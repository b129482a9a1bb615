//! Exits, interrupts and odd exceptions end the program as data, never by trapping the instance.

use ptc_engine::FailureKind;
use ptc_tests::*;

#[tokio::test]
async fn sys_exit_zero_completes_and_keeps_output() {
    let done = run_code("import sys\nprint('a')\nsys.exit(0)\nprint('b')").await.completed();
    assert_eq!(done.stdout, "a\n");
}

#[tokio::test]
async fn sys_exit_nonzero_fails_with_its_code() {
    let f = run_code("import sys\nprint('bye')\nsys.exit(3)").await.failed();
    assert_eq!((f.kind, f.exit_code), (FailureKind::Exit, Some(3)));
    assert_eq!(f.stdout, "bye\n");
    let f = run_code("raise SystemExit('fatal')").await.failed();
    assert_eq!((f.kind, f.exit_code), (FailureKind::Exit, Some(1)));
    assert_eq!(f.stderr, "fatal\n");
}

#[tokio::test]
async fn keyboard_interrupt_and_base_exception_subclasses_are_python_errors() {
    let f = run_code("raise KeyboardInterrupt").await.failed();
    assert_eq!((f.kind, f.message.as_str()), (FailureKind::PythonError, "KeyboardInterrupt"));
    let f = run_code("class Boom(BaseException): pass\nasync def f():\n    raise Boom('x')\nawait f()").await.failed();
    assert_eq!((f.kind, f.message.as_str()), (FailureKind::PythonError, "Boom: x"));
    assert!(f.traceback.contains("line 3, in f"), "{}", f.traceback);
}

#[tokio::test]
async fn errors_in_del_do_not_break_the_run() {
    let code =
        "class C:\n    def __del__(self):\n        raise ValueError('in del')\nc = C()\ndel c\nprint('still running')";
    let run = run_code(code).await.completed();
    assert_eq!(run.stdout, "still running\n");
    assert!(run.stderr.contains("ValueError: in del"), "{}", run.stderr);
}

#[tokio::test]
async fn empty_and_comment_only_code_complete_with_no_output() {
    for code in ["", "\n\n", "# just a comment\n# and another"] {
        let done = run_code(code).await.completed();
        assert_eq!((done.stdout.as_str(), done.stderr.as_str(), done.return_value.as_str()), ("", "", "null"));
    }
}

#[tokio::test]
async fn syntax_errors_point_at_the_users_line() {
    let f = run_code("x = 1\ny = (\n").await.failed();
    assert_eq!(f.kind, FailureKind::PythonError);
    assert!(f.message.starts_with("SyntaxError"), "{}", f.message);
    assert!(f.traceback.contains("line 2"), "{}", f.traceback);
}

#[tokio::test]
async fn traceback_line_numbers_are_the_users_own() {
    let f = run_code("def f(x):\n    return 1 / x\n\nprint('start')\nf(0)\n").await.failed();
    assert_eq!(f.message, "ZeroDivisionError: division by zero");
    assert!(f.traceback.contains("File \"<code>\", line 5, in <module>"), "{}", f.traceback);
    assert!(f.traceback.contains("File \"<code>\", line 2, in f"), "{}", f.traceback);
    assert!(f.traceback.contains("return 1 / x"), "{}", f.traceback);
    assert_eq!(f.stdout, "start\n");
}

#[tokio::test]
async fn each_execution_is_isolated_and_random_is_reseeded() {
    let a = run_code("import random\nx = 41\nprint(random.random())").await.completed().stdout;
    let b = run_code("import random\nprint(random.random())\nprint('x' in globals())").await.completed().stdout;
    assert_ne!(a.lines().next(), b.lines().next(), "random must differ between runs");
    assert_eq!(b.lines().nth(1), Some("False"));
}

#[tokio::test]
async fn deep_recursion_is_a_recursion_error() {
    let f = run_code("def f(n):\n    return f(n + 1)\nf(0)").await.failed();
    assert_eq!(f.kind, FailureKind::PythonError);
    assert!(f.message.starts_with("RecursionError"), "{}", f.message);
}
