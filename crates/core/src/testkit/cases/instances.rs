//! The instance cases, for stores that implement [`Instances`]: boots counted per instance name,
//! a new boot freeing the claims of the boots before it, and the liveness lease that decides
//! when another process may take a name.

use super::*;
use crate::claim::RecordState;

async fn in_flight<S: ClaimStore>(store: &S, key: &Key) {
    match store.claim(req(key)).await.expect("claim") {
        ClaimOutcome::InFlight { .. } => {}
        other => panic!("{key}: expected InFlight, got {other:?}"),
    }
}

pub async fn a_new_boot_frees_the_claims_of_earlier_boots<H>(h: &H)
where
    H: Harness,
    H::Store: Instances,
{
    let store = h.store();
    let name = InstanceName::new("gw-a").unwrap();
    let first = booted(&store, &name).await;
    assert_eq!((first.holder.clone(), first.freed), (holder("gw-a", 1), 0));
    // Held by the first boot: freed by the next.
    let abandoned = key("src");
    claimed(&store, req(&abandoned).holder(first.holder.clone())).await;
    // Held under the boot about to be registered, by another instance, by nobody.
    let (current, other, anonymous) = (key("src"), key("src"), key("src"));
    claimed(&store, req(&current).holder(holder("gw-a", 2))).await;
    claimed(&store, req(&other).holder(holder("gw-b", 1))).await;
    claimed(&store, req(&anonymous)).await;
    // Done under the first boot: nothing to free.
    let done = key("src");
    let token = claimed(&store, req(&done).holder(first.holder.clone())).await;
    store.complete(&token).await.unwrap();

    let second = restarted(&store, &first).await;
    assert_eq!(second.holder, holder("gw-a", 2));
    assert_eq!(second.freed, 1, "{second:?}");
    assert!(second.started_at >= first.started_at);

    let rec = record(&store, &abandoned).await;
    assert_eq!(rec.state, RecordState::Processing);
    assert_eq!(
        rec.holder,
        Some(first.holder.clone()),
        "still shows who held it"
    );
    let view = store.lookup(&abandoned).await.unwrap();
    let row = view.history.last().unwrap();
    assert_eq!(
        (row.outcome, row.attempt, row.processed),
        (HistoryOutcome::Abandoned, Some(1), false)
    );
    assert!(row.at >= second.started_at, "{row:?} {second:?}");
    // Takeable at once: the next delivery takes it over.
    let taken = claimed(&store, req(&abandoned).holder(second.holder.clone())).await;
    assert_eq!(taken.attempt, 2);
    assert_eq!(
        record(&store, &abandoned).await.holder,
        Some(second.holder.clone())
    );
    assert_eq!(
        outcomes(&store, &abandoned).await,
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::Abandoned,
            HistoryOutcome::Reclaimed
        ]
    );
    for key in [&current, &other, &anonymous] {
        in_flight(&store, key).await;
        assert!(
            !outcomes(&store, key)
                .await
                .contains(&HistoryOutcome::Abandoned),
            "{key}"
        );
    }
    assert!(matches!(
        store.claim(req(&done)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    // The third boot frees what the second holds: the claim it took over, and the one
    // claimed under its number before it was registered.
    let third = restarted(&store, &second).await;
    assert_eq!((third.holder.boot, third.freed), (3, 2), "{third:?}");
    in_flight(&store, &other).await;
}

pub async fn boots_are_counted_per_instance<H>(h: &H)
where
    H: Harness,
    H::Store: Instances,
{
    let store = h.store();
    let (a, b) = (
        InstanceName::new("gw-a").unwrap(),
        InstanceName::new("GW_b.2").unwrap(),
    );
    let mut seen = Vec::new();
    let mut live: Vec<Boot> = Vec::new();
    for name in [&a, &a, &b, &a, &b] {
        // Each process stops before the next of its name starts.
        if let Some(i) = live.iter().position(|b| b.holder.instance == *name) {
            let prev = live.remove(i);
            store.end_boot(&prev.holder).await.expect("end");
        }
        let boot = booted(&store, name).await;
        assert_eq!(boot.holder.instance, *name);
        assert_eq!(boot.freed, 0);
        seen.push(boot.holder.boot);
        live.push(boot);
    }
    assert_eq!(seen, [1, 2, 1, 3, 2]);
}

/// A second process started under a live boot's name (an operator's typo, a supervisor
/// restarting too eagerly, two hosts with one name) is refused, told which process holds the
/// name, and changes nothing: the live boot's claims stay its own.
pub async fn a_live_boot_refuses_a_second_process_and_frees_nothing<H>(h: &H)
where
    H: Harness,
    H::Store: Instances,
{
    let store = h.store();
    let name = InstanceName::new("gw-live").unwrap();
    let first = booted(&store, &name).await;
    let held = key("src");
    claimed(&store, req(&held).holder(first.holder.clone())).await;
    let second = BootRequest {
        host: "other-host".into(),
        pid: 7,
        ..boot_request(&name)
    };
    match store.register_boot(&second).await {
        Err(StoreError::InstanceLive { live }) => {
            assert_eq!(live.holder, first.holder);
            assert_eq!((live.host.as_str(), live.pid), ("test-host", 4242));
            assert!(
                live.remaining > Duration::ZERO && live.remaining <= BOOT_LEASE,
                "{live:?}"
            );
            assert!(live.alive_until > live.started_at, "{live:?}");
        }
        other => panic!("a second process was not refused: {other:?}"),
    }
    // Nothing freed, nothing counted.
    in_flight(&store, &held).await;
    assert_eq!(
        outcomes(&store, &held).await,
        [HistoryOutcome::Claimed, HistoryOutcome::InFlight]
    );
    let next = restarted(&store, &first).await;
    assert_eq!((next.holder.boot, next.freed), (2, 1), "{next:?}");
}

/// A boot that stops renewing (killed, cut off from the store, frozen) is taken for dead once
/// its liveness lease lapses: the next boot registers and frees its claims.
pub async fn a_boot_whose_liveness_lease_lapsed_is_taken_for_dead<H>(h: &H)
where
    H: Harness,
    H::Store: Instances,
{
    let store = h.store();
    let name = InstanceName::new("gw-crashed").unwrap();
    let short = BootRequest {
        lease: SHORT_LEASE,
        ..boot_request(&name)
    };
    let first = store.register_boot(&short).await.expect("register");
    let held = key("src");
    claimed(&store, req(&held).holder(first.holder.clone())).await;
    h.advance(SHORT_LEASE).await;
    let second = store
        .register_boot(&short)
        .await
        .expect("the lapsed boot is dead");
    assert_eq!((second.holder.boot, second.freed), (2, 1), "{second:?}");
    assert_eq!(claimed(&store, req(&held)).await.attempt, 2);
}

pub async fn a_heartbeat_keeps_a_boot_alive<H>(h: &H)
where
    H: Harness,
    H::Store: Instances,
{
    let store = h.store();
    let name = InstanceName::new("gw-beat").unwrap();
    let lease = SHORT_LEASE * 2;
    let short = BootRequest {
        lease,
        ..boot_request(&name)
    };
    let first = store.register_boot(&short).await.expect("register");
    h.advance(SHORT_LEASE).await;
    let until = store
        .heartbeat(&first.holder, lease)
        .await
        .expect("heartbeat");
    assert!(until > first.started_at.plus(lease), "renewed: {until:?}");
    // Past the first lease, within the renewed one: still alive.
    h.advance(SHORT_LEASE + SHORT_LEASE / 2).await;
    assert!(matches!(
        store.register_boot(&short).await,
        Err(StoreError::InstanceLive { .. })
    ));
    // Stopped: the next boot starts at once.
    store.end_boot(&first.holder).await.expect("end");
    assert_eq!(
        store
            .register_boot(&short)
            .await
            .expect("register")
            .holder
            .boot,
        2
    );
}

/// A boot whose lease lapsed and whose name another process then took must stop: its
/// heartbeat says so, and neither it nor its end touches the new boot.
pub async fn a_superseded_boot_hears_so_and_cannot_end_the_new_one<H>(h: &H)
where
    H: Harness,
    H::Store: Instances,
{
    let store = h.store();
    let name = InstanceName::new("gw-cut-off").unwrap();
    let short = BootRequest {
        lease: SHORT_LEASE,
        ..boot_request(&name)
    };
    let first = store.register_boot(&short).await.expect("register");
    h.advance(SHORT_LEASE).await;
    let second = booted(&store, &name).await;
    match store.heartbeat(&first.holder, SHORT_LEASE).await {
        Err(StoreError::Superseded { holder, by }) => {
            assert_eq!((holder, by), (first.holder.clone(), 2));
        }
        other => panic!("the superseded boot was not told: {other:?}"),
    }
    store
        .end_boot(&first.holder)
        .await
        .expect("end of a superseded boot");
    match store.register_boot(&boot_request(&name)).await {
        Err(StoreError::InstanceLive { live }) => assert_eq!(live.holder, second.holder),
        other => panic!("the new boot's lease was ended by the old one: {other:?}"),
    }
}

/// A process that proved the latest boot's process gone (on the same machine: the gateway
/// looks its pid up) registers over it at once, without waiting for its lease; the proof
/// names that boot, so it cannot pass over a newer one.
pub async fn a_boot_proved_dead_is_registered_over_at_once<H>(h: &H)
where
    H: Harness,
    H::Store: Instances,
{
    let store = h.store();
    let name = InstanceName::new("gw-proved").unwrap();
    let first = store
        .register_boot(&BootRequest {
            process: "kernel-1/pidns-1/77/123".into(),
            ..boot_request(&name)
        })
        .await
        .expect("register");
    let held = key("src");
    claimed(&store, req(&held).holder(first.holder.clone())).await;
    let live = match store.register_boot(&boot_request(&name)).await {
        Err(StoreError::InstanceLive { live }) => live,
        other => panic!("{other:?}"),
    };
    assert_eq!(live.process, "kernel-1/pidns-1/77/123");
    let second = store
        .register_boot(&BootRequest {
            supersede: Some(live.holder.boot),
            ..boot_request(&name)
        })
        .await
        .expect("registered over the boot proved dead");
    assert_eq!((second.holder.boot, second.freed), (2, 1), "{second:?}");
    // A proof about boot 1 says nothing of boot 2.
    match store
        .register_boot(&BootRequest {
            supersede: Some(first.holder.boot),
            ..boot_request(&name)
        })
        .await
    {
        Err(StoreError::InstanceLive { live }) => assert_eq!(live.holder, second.holder),
        other => panic!("a stale proof passed over a live boot: {other:?}"),
    }
}

pub async fn a_new_boot_leaves_lapsed_and_expired_claims_alone<H>(h: &H)
where
    H: Harness,
    H::Store: Instances,
{
    let store = h.store();
    let name = InstanceName::new("gw-a").unwrap();
    let first = booted(&store, &name).await;
    let lapsed = key("src");
    claimed(
        &store,
        ClaimRequest::new(lapsed.clone(), SHORT_LEASE, LONG_TTL).holder(first.holder.clone()),
    )
    .await;
    let expired = key("src");
    claimed(
        &store,
        ClaimRequest::new(expired.clone(), SHORT_TTL, SHORT_TTL).holder(first.holder.clone()),
    )
    .await;
    h.advance(SHORT_TTL).await;
    let second = restarted(&store, &first).await;
    assert_eq!(second.freed, 0, "already takeable: {second:?}");
    assert_eq!(outcomes(&store, &lapsed).await, [HistoryOutcome::Claimed]);
    assert_eq!(outcomes(&store, &expired).await, [HistoryOutcome::Claimed]);
    assert_eq!(claimed(&store, req(&lapsed)).await.attempt, 2);
    assert_eq!(claimed(&store, req(&expired)).await.attempt, 1);
}
