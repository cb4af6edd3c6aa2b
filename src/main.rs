fn main() -> std::process::ExitCode {
    relayq::cli::main()
}
