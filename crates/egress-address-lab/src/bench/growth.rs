//! `bench growth`: the same controller over cells of growing size, to see whether a shard costs
//! the same in a large cell as in a small one. For each size: the ideal client's wall and the
//! controller's (wall, CPU, peak RSS), then a restart against the addressed cell (time to
//! /ready, RSS). The CPU of the bench process, which is localplane serving (the bench itself only
//! polls a counter), is read from `/proc` beside the controller's, so localplane's share shows.
//! Slopes are least-squares fits over the sizes.

use std::path::Path;
use std::time::Duration;

use anyhow::bail;
use clap::Args;

use super::host::{LoadAvg, MIB, load_range, mib};
use super::report::{Measurement, RestartMeasurement, Run, spread};
use super::shape::Objects;
use super::{Common, command_line, controller_run, ideal_run, restart_after};

/// Options of `bench growth`.
#[derive(Args, Debug, Clone)]
pub struct GrowthArgs {
    #[command(flatten)]
    pub common: Common,
    /// Cell sizes, each addressed from scratch.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,50000,100000")]
    pub shards: Vec<usize>,
    /// The controller's reconcile concurrency, and the ideal client's parallel tasks.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Ideal and controller runs per size.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// How long a restarted controller is watched after it is ready.
    #[arg(long, default_value_t = 5)]
    pub restart_watch_seconds: u64,
    /// Give up on one run after this long.
    #[arg(long, default_value_t = 1800)]
    pub run_timeout_seconds: u64,
}

/// One size.
#[derive(Debug, Clone)]
pub struct Size {
    pub measurement: Measurement,
    pub restart: RestartMeasurement,
}

/// What `bench growth` measured.
#[derive(Debug, Clone, Default)]
pub struct GrowthReport {
    pub command: String,
    pub objects: Objects,
    pub concurrency: usize,
    pub sizes: Vec<Size>,
}

pub async fn measure(args: &GrowthArgs, bin: &Path) -> anyhow::Result<GrowthReport> {
    if args.shards.is_empty() || args.repeat == 0 {
        bail!("--shards needs a value and --repeat must be at least 1");
    }
    let timeout = Duration::from_secs(args.run_timeout_seconds);
    let objects = args.common.objects;
    let mut report = GrowthReport {
        command: command_line(),
        objects,
        concurrency: args.concurrency,
        sizes: vec![],
    };
    for &n in &args.shards {
        let (mut runs, mut ideal_walls, mut ideal_cps) = (vec![], vec![], vec![]);
        let mut restart = None;
        for rep in 1..=args.repeat {
            eprintln!("bench growth: {n} shards, run {rep}");
            let cell = args.common.cell;
            let (ideal_wall, ideal_cp) =
                ideal_run(cell, n, args.concurrency, objects, timeout).await?;
            ideal_walls.push(ideal_wall);
            ideal_cps.extend(ideal_cp);
            let (run, mut bed, ctl, spec) =
                controller_run(cell, bin, n, args.concurrency, rep, timeout, objects, &[]).await?;
            eprintln!(
                "bench growth: {n} shards: controller {:.2} s, ideal {:.2} s",
                run.wall.as_secs_f64(),
                ideal_walls.last().map_or(0.0, Duration::as_secs_f64)
            );
            runs.push(run);
            ctl.stop(Duration::from_secs(10)).await;
            if rep == args.repeat {
                restart = Some(
                    restart_after(args.restart_watch_seconds, &mut bed, &spec, n, timeout).await?,
                );
            }
            bed.shutdown().await;
        }
        let mut measurement = Measurement::new(runs, ideal_walls);
        measurement.ideal_control_plane = ideal_cps;
        let size = Size {
            measurement,
            restart: restart.expect("the last run restarts"),
        };
        eprintln!("{}", size.line());
        report.sizes.push(size);
    }
    Ok(report)
}

impl Size {
    /// `bench: growth N shards: ...`: the size's figures on one line, the restart beside the
    /// ideal lister's time over the same shards.
    pub fn line(&self) -> String {
        let m = &self.measurement;
        let r = &self.restart;
        let lister = r.against_lister();
        format!(
            "bench: growth {} shards: controller {:.2} s, ideal {:.2} s ({:.2} x), {:.3} requests \
             per new shard, events all sent after {:.2} s, peak RSS {}, restart to /ready {:.2} s, \
             ideal lister {lister}, restart peak RSS {}",
            m.shards(),
            m.wall().as_secs_f64(),
            m.ideal_wall().as_secs_f64(),
            m.ratio(),
            m.per_new_shard(),
            m.events_done().as_secs_f64(),
            mib(m.peak_rss()),
            r.to_ready.as_secs_f64(),
            mib(r.peak_rss),
        )
    }
}

/// The least-squares slope of `y` over `x`.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let num: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    (den > 0.0).then(|| num / den)
}

fn percent_of_core(cpu: Option<Duration>, wall: Duration) -> String {
    cpu.map(|c| {
        format!(
            "{:.0}%",
            100.0 * c.as_secs_f64() / wall.as_secs_f64().max(1e-9)
        )
    })
    .unwrap_or_else(|| "n/a".into())
}

fn median_run(m: &Measurement) -> &Run {
    let wall = m.wall();
    m.runs
        .iter()
        .min_by_key(|r| r.wall.abs_diff(wall))
        .expect("a measurement has runs")
}

impl GrowthReport {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "`{}` ({} shards, concurrency {}; load average {})\n\n",
            self.command,
            self.objects.as_str(),
            self.concurrency,
            load_range(
                &self
                    .sizes
                    .iter()
                    .flat_map(|z| z.measurement.loads())
                    .collect::<Vec<LoadAvg>>()
            ),
        );
        let real = self.sizes.iter().any(|z| z.measurement.on_real_cell());
        s.push_str("| shards | controller wall | ideal wall | ratio | controller wall per 1,000 shards | controller CPU per shard | controller CPU, share of one core | localplane CPU per shard | localplane CPU, share of one core | peak RSS | restart: time to /ready | restart: ideal lister | restart: peak RSS |");
        if real {
            s.push_str(" control plane CPU per shard (ideal's) | control plane CPU, share of one core | control plane RSS (peak) |");
        }
        s.push_str(" load |\n");
        s.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        if real {
            s.push_str("---:|---:|---:|");
        }
        s.push_str("---:|\n");
        for z in &self.sizes {
            let m = &z.measurement;
            let r = median_run(m);
            let control_plane = if real {
                let (ctl, ideal) = m.control_plane_cpu_per_shard_ms();
                let (rss, peak) = m.control_plane_rss();
                format!(
                    " {} ({}) | {} | {} ({}) |",
                    super::report::cpu_ms(ctl),
                    super::report::cpu_ms(ideal),
                    percent_of_core(r.control_plane.and_then(|c| c.cpu), r.wall),
                    mib(rss),
                    mib(peak)
                )
            } else {
                String::new()
            };
            s.push_str(&format!(
                "| {} | {} | {} | {:.2} | {:.3} s | {} | {} | {} | {} | {} | {:.2} s | {} | {} |{} {} |\n",
                m.shards(),
                spread(&m.walls()),
                spread(&m.ideal_walls),
                m.ratio(),
                m.wall().as_secs_f64() * 1000.0 / m.shards().max(1) as f64,
                super::report::cpu_ms(m.cpu_per_shard_ms()),
                percent_of_core(r.cpu, r.wall),
                super::report::cpu_ms(m.server_cpu_per_shard_ms()),
                percent_of_core(r.server_cpu, r.wall),
                mib(m.peak_rss()),
                z.restart.to_ready.as_secs_f64(),
                z.restart.against_lister(),
                mib(z.restart.peak_rss),
                control_plane,
                load_range(&m.loads()),
            ));
        }
        let pts = |f: &dyn Fn(&Size) -> Option<f64>| -> Vec<(f64, f64)> {
            self.sizes
                .iter()
                .filter_map(|z| f(z).map(|y| (z.measurement.shards() as f64, y)))
                .collect()
        };
        let wall = slope(&pts(&|z| Some(z.measurement.wall().as_secs_f64() * 1000.0)));
        let cpu = slope(&pts(&|z| {
            z.measurement.cpu().map(|c| c.as_secs_f64() * 1000.0)
        }));
        let rss = slope(&pts(&|z| {
            z.measurement.peak_rss().map(|b| b as f64 / 1024.0)
        }));
        let ready = slope(&pts(&|z| Some(z.restart.to_ready.as_secs_f64() * 1000.0)));
        let restart_rss = slope(&pts(&|z| z.restart.peak_rss.map(|b| b as f64 / 1024.0)));
        let f = |v: Option<f64>, unit: &str| {
            v.map(|v| format!("{v:.3} {unit}"))
                .unwrap_or_else(|| "n/a".into())
        };
        s.push_str(&format!(
            "\nSlopes (least squares over the sizes, per added shard): controller wall {}, controller CPU {}, peak RSS {}, restart time to /ready {}, restart peak RSS {}.\n",
            f(wall, "ms"),
            f(cpu, "ms"),
            f(rss, "KiB"),
            f(ready, "ms"),
            f(restart_rss, "KiB"),
        ));
        if let (Some(first), Some(last)) = (self.sizes.first(), self.sizes.last()) {
            let per = |z: &Size| z.measurement.cpu_per_shard_ms();
            if let (Some(a), Some(b)) = (per(first), per(last)) {
                s.push_str(&format!(
                    "Controller CPU per shard at {} shards over that at {}: {:.2}. Peak RSS per shard at {}: {:.1} KiB.\n",
                    last.measurement.shards(),
                    first.measurement.shards(),
                    b / a.max(1e-9),
                    last.measurement.shards(),
                    last.measurement.peak_rss().unwrap_or(0) as f64 / MIB * 1024.0
                        / last.measurement.shards().max(1) as f64,
                ));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_its_slope() {
        assert_eq!(slope(&[(1.0, 3.0), (2.0, 5.0), (4.0, 9.0)]), Some(2.0));
        assert_eq!(slope(&[(1.0, 3.0)]), None);
        assert_eq!(slope(&[(1.0, 3.0), (1.0, 4.0)]), None);
    }

    #[test]
    fn a_size_is_one_line_with_its_events_and_the_restart_beside_the_lister() {
        let secs = Duration::from_secs_f64;
        let run = Run::collect(
            &[],
            50_000,
            4,
            secs(457.88),
            secs(461.2),
            None,
            None,
            Some(45 * MIB as u64),
        );
        let mut restart =
            RestartMeasurement::collect(&[], 50_000, secs(23.73), 15, Some(43 * MIB as u64));
        restart.ideal_lister = Some(secs(17.92));
        restart.ideal_lister_runs = vec![secs(20.77), secs(15.08)];
        let size = Size {
            measurement: Measurement::new(vec![run], vec![secs(239.93)]),
            restart,
        };
        assert_eq!(
            size.line(),
            "bench: growth 50000 shards: controller 457.88 s, ideal 239.93 s (1.91 x), 0.000 \
             requests per new shard, events all sent after 461.20 s, peak RSS 45.0 MiB, restart to \
             /ready 23.73 s, ideal lister 17.92 s (1.32 x; 20.77 s before, 15.08 s after), restart \
             peak RSS 43.0 MiB"
        );
    }
}
