//! The store conformance suite on a real PostgreSQL, once per expiry mode.

mod common;

mod batched {
    use super::common;
    use idemgate_postgres::Expiry;

    idemgate_core::conformance_tests!(common::harness(Expiry::batched()));
    idemgate_core::sweep_conformance_tests!(common::harness(Expiry::batched()));
    idemgate_core::history_conformance_tests!(common::harness(Expiry::batched()));
    idemgate_core::timeline_conformance_tests!(common::harness(Expiry::batched()));
    idemgate_core::instances_conformance_tests!(common::harness(Expiry::batched()));
    idemgate_core::inbox_conformance_tests!(common::harness(Expiry::batched()));
}

mod partitioned {
    use super::common;

    idemgate_core::conformance_tests!(common::harness(common::partitioned_hourly()));
    idemgate_core::sweep_conformance_tests!(common::harness(common::partitioned_hourly()));
    idemgate_core::history_conformance_tests!(common::harness(common::partitioned_hourly()));
    idemgate_core::timeline_conformance_tests!(common::harness(common::partitioned_hourly()));
    idemgate_core::instances_conformance_tests!(common::harness(common::partitioned_hourly()));
    idemgate_core::inbox_conformance_tests!(common::harness(common::partitioned_hourly()));
}
