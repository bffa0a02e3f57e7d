//! A wrong handler signature gives a readable error.

#[test]
fn wrong_handlers_do_not_compile_and_say_why() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
