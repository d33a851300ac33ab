fn main() {
    shmem::sys::abort_on_panic();
    std::process::exit(postmaster::main());
}
