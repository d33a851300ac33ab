//! Tests that differ only in their arguments: `test_cases!` writes one
//! `#[test]` a row of a table, each calling the same function, so that
//! every case keeps a name of its own (run alone with
//! `cargo test --test GROUP -- NAME --exact`, reported alone when it
//! fails) without a copied body.

/// `test_cases!(run: name => (arg, ...), ...)` defines, for each row,
/// `#[test] fn name() { run(arg, ...) }`; attributes and doc comments
/// before a row's name go to its test.
#[macro_export]
macro_rules! test_cases {
    ($run:path: $($(#[$meta:meta])* $name:ident => ($($arg:expr),* $(,)?)),* $(,)?) => {
        $(
            $(#[$meta])*
            #[test]
            fn $name() {
                $run($($arg),*);
            }
        )*
    };
}
