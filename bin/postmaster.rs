fn main() {
    std::process::exit(postmaster::main());
}
