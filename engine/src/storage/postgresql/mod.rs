//! The PostgreSQL backend: several daemons on one database.

pub mod client;
pub mod connection;
pub mod db;
pub mod notify;

#[cfg(any(test, feature = "test-helpers"))]
pub mod test_server;

#[cfg(test)]
mod tests {
    use super::test_server::TestServer;

    #[test]
    fn a_test_server_starts_answers_on_its_socket_and_survives_an_immediate_restart() {
        let server = TestServer::start();
        let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        client
            .batch_execute("CREATE TABLE t (x BIGINT); INSERT INTO t VALUES (7)")
            .unwrap();
        drop(client);
        server.restart_immediate();
        let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        let x: i64 = client.query_one("SELECT x FROM t", &[]).unwrap().get(0);
        assert_eq!(x, 7, "a committed row survives the crash");
    }
}
