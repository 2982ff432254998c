//! The work queue's gauges, asked of the queue at scrape time: how deep it is, and how long the
//! work in flight has been running. A gauge kept up to date by the workers would go stale
//! exactly when it matters, while a worker is stuck.

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;

use prometheus_client::encoding::EncodeLabelSet;

/// A work queue's labels: controller-runtime names each controller's queue after it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    controller: &'static str,
    name: &'static str,
}

impl QueueLabels {
    /// The queue of `controller`.
    pub const fn of(controller: &'static str) -> Self {
        Self {
            controller,
            name: controller,
        }
    }
}

/// The queue as one scrape sees it.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct QueueLoad {
    /// Keys waiting to be handed out.
    pub depth: usize,
    /// Running time of all work in flight, added up.
    pub unfinished: Duration,
    /// Running time of the oldest work in flight.
    pub longest: Duration,
}

/// Asked once per scrape.
pub type QueueProbe = Box<dyn Fn() -> QueueLoad + Send + Sync>;

/// The probe of the running controller's queue, once there is one.
#[derive(Clone)]
pub struct QueueGauges {
    probe: Arc<RwLock<Option<QueueProbe>>>,
    labels: QueueLabels,
}

impl fmt::Debug for QueueGauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueGauges").finish_non_exhaustive()
    }
}

impl QueueGauges {
    pub fn new(labels: QueueLabels) -> Self {
        Self {
            probe: Arc::default(),
            labels,
        }
    }

    pub fn watch(&self, probe: QueueProbe) {
        *crate::sync::write(&self.probe) = Some(probe);
    }

    /// What the queue says now; all zero before a queue exists or after it is gone.
    pub fn load(&self) -> QueueLoad {
        crate::sync::read(&self.probe)
            .as_ref()
            .map(|probe| probe())
            .unwrap_or_default()
    }
}

impl Collector for QueueGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let load = self.load();
        let gauges = [
            (
                "workqueue_depth",
                "Current depth of workqueue",
                load.depth as f64,
            ),
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                load.unfinished.as_secs_f64(),
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                load.longest.as_secs_f64(),
            ),
        ];
        for (name, help, value) in gauges {
            let g = ConstGauge::new(value);
            let mut family = encoder.encode_descriptor(name, help, None, g.metric_type())?;
            g.encode(family.encode_family(&self.labels)?)?;
        }
        Ok(())
    }
}
