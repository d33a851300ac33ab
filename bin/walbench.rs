fn main() {
    std::process::exit(walbench::main());
}
