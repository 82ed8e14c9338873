//! What the dashboard keeps between pages, as part of the gateway's state: who may open it, the
//! sweeper's last runs, the advisor's cached figures, the last counts of deliveries over time.
//! Nothing here reads the rest of the state, which holds it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idemgate_core::advise::Advice;
use idemgate_core::sweep::SweepReport;
use idemgate_core::{SourceName, StoreError, TimelineCounts};

use crate::config::Config;
use crate::error::ErrorChain;

/// Sweeper runs remembered.
const SWEEPS_KEPT: usize = 10;

/// The dashboard's share of the gateway's state.
#[derive(Debug)]
pub(crate) struct Dashboard {
    /// `dashboard_token`: with it, any peer presenting it may open the dashboard.
    pub(super) token: Option<crate::config::token::Digest>,
    /// `store.sweep_interval`: a sweeper silent for much longer is a warning.
    pub(super) sweep_interval: Duration,
    /// The last runs of the background sweeper, newest first.
    pub(super) sweeps: Mutex<VecDeque<SweepRun>>,
    /// The advisor's figures, as last computed.
    pub(super) advice: Mutex<Option<Arc<Advised>>>,
    /// Whether a background refresh of `advice` is running.
    pub(super) refreshing: Arc<AtomicBool>,
    /// Told when a refresh of `advice` ended, well or not.
    pub(super) refreshed: tokio::sync::Notify,
    /// Why the last refresh failed, when it did and no figures are cached.
    pub(super) advice_error: Mutex<Option<String>>,
    /// Each source's deliveries over time as last counted, by source and bucket width.
    pub(super) timelines: Mutex<HashMap<(SourceName, u32), TimelineCounts>>,
    /// Sources whose count of deliveries over time runs behind the pages.
    pub(super) counting: Mutex<HashSet<SourceName>>,
    /// Told when a count ended, well or not.
    pub(super) counted: tokio::sync::Notify,
    /// Why a source's last count failed, until one succeeds.
    pub(super) count_errors: Mutex<HashMap<SourceName, String>>,
    /// Sources on a store that keeps no timeline (the Redis store): asked once.
    pub(super) no_timeline: Mutex<HashSet<SourceName>>,
    /// The token every form of the dashboard carries and its POST must send back: a page of
    /// another site cannot read it, so it cannot make a browser that may open the dashboard
    /// replay dead letters (a loopback peer needs no other credential). New for each process.
    pub(super) form_token: String,
}

impl Dashboard {
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            token: config
                .dashboard_token
                .as_deref()
                .map(crate::config::token::digest),
            sweep_interval: config.store.sweep_interval,
            sweeps: Mutex::default(),
            advice: Mutex::default(),
            refreshing: Arc::default(),
            refreshed: tokio::sync::Notify::new(),
            advice_error: Mutex::default(),
            timelines: Mutex::default(),
            counting: Mutex::default(),
            counted: tokio::sync::Notify::new(),
            count_errors: Mutex::default(),
            no_timeline: Mutex::default(),
            form_token: idemgate_core::machine::random_store_id(),
        }
    }

    /// Remembers one run of the background sweeper.
    pub(crate) fn sweep_run(&self, run: &Result<SweepReport, StoreError>) {
        let entry = match run {
            Ok(r) => SweepRun {
                at: Instant::now(),
                rows: r.rows,
                batches: r.batches,
                elapsed: r.elapsed,
                partitions: r.partitions_created.len() + r.partitions_dropped.len(),
                error: None,
            },
            Err(e) => SweepRun {
                at: Instant::now(),
                rows: 0,
                batches: 0,
                elapsed: Duration::ZERO,
                partitions: 0,
                error: Some(ErrorChain(e).to_string()),
            },
        };
        let mut sweeps = self.sweeps.lock().unwrap_or_else(|p| p.into_inner());
        sweeps.push_front(entry);
        sweeps.truncate(SWEEPS_KEPT);
    }

    pub(super) fn sweeps(&self) -> Vec<SweepRun> {
        let sweeps = self.sweeps.lock().unwrap_or_else(|p| p.into_inner());
        sweeps.iter().cloned().collect()
    }
}

/// One run of the background sweeper, as the dashboard lists it.
#[derive(Debug, Clone)]
pub(super) struct SweepRun {
    /// When it ended, by this process's monotonic clock (shown as an age).
    pub(super) at: Instant,
    pub(super) rows: u64,
    pub(super) batches: u64,
    pub(super) elapsed: Duration,
    /// Partitions created and dropped (PostgreSQL's partitioned mode).
    pub(super) partitions: usize,
    pub(super) error: Option<String>,
}

/// The advisor's figures for every configured source, by name.
#[derive(Debug)]
pub(super) struct Advised {
    pub(super) at: Instant,
    pub(super) sources: Vec<(Advice, Vec<Duration>)>,
    /// Each source's gap histogram, wide and narrow, as the page shows it (in the order of
    /// `sources`): drawn once each time the figures are computed, not on every view (binning a
    /// long history's gaps takes tens of milliseconds).
    pub(super) gap_figures: Vec<String>,
}
