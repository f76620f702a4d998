//! Resource quantities as the apiserver writes them (`512Mi`, `50m`) and a container's
//! requests and limits as the kubelet hands them to the runtime (cpu shares, CFS quota,
//! memory limit).
use anyhow::Context as _;
use k8s_cri::v1::LinuxContainerResources;
use k8s_openapi::api::core::v1::Container;

/// Bytes of a memory quantity (`512Mi`, `1G`, `128974848`).
pub fn memory_bytes(q: &str) -> anyhow::Result<i64> {
    let units = [
        ("Ki", 1i64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("k", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ];
    let (digits, unit) = units
        .iter()
        .find_map(|(s, m)| q.strip_suffix(s).map(|d| (d, *m)))
        .unwrap_or((q, 1));
    let n: i64 = digits
        .parse()
        .with_context(|| format!("memory quantity {q:?}"))?;
    Ok(n * unit)
}

/// Millicores of a cpu quantity (`50m`, `1`, `0.5`).
pub fn millicores(q: &str) -> anyhow::Result<i64> {
    if let Some(m) = q.strip_suffix('m') {
        return m.parse().with_context(|| format!("cpu quantity {q:?}"));
    }
    let cores: f64 = q.parse().with_context(|| format!("cpu quantity {q:?}"))?;
    // Quantities have at most millicore precision.
    #[allow(clippy::cast_possible_truncation)]
    Ok((cores * 1000.0).round() as i64)
}

/// The runtime's resources of container `c`.
pub fn resources(c: &Container) -> anyhow::Result<LinuxContainerResources> {
    let res = c.resources.clone().unwrap_or_default();
    let (requests, limits) = (
        res.requests.unwrap_or_default(),
        res.limits.unwrap_or_default(),
    );
    let mut out = LinuxContainerResources {
        cpu_shares: 2,
        ..Default::default()
    };
    if let Some(cpu) = requests.get("cpu").or(limits.get("cpu")) {
        out.cpu_shares = (millicores(&cpu.0)? * 1024 / 1000).max(2);
    }
    if let Some(cpu) = limits.get("cpu") {
        out.cpu_period = 100_000;
        out.cpu_quota = millicores(&cpu.0)? * 100;
    }
    if let Some(memory) = limits.get("memory") {
        out.memory_limit_in_bytes = memory_bytes(&memory.0)?;
    }
    Ok(out)
}
