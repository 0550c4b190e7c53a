//! `LAZOR_VIZ=dir` writes one DOT file per realize. Its own test binary: the knob is read once per process.

mod common;

#[test]
fn every_realize_writes_its_graph() {
    let dir = std::env::temp_dir().join(format!("lazor-viz-{}", std::process::id()));
    std::env::set_var("LAZOR_VIZ", &dir);
    for dev in common::devices() {
        let x = lazor::Tensor::from_vec_on(vec![1.0f32, -2.0, 3.0], [3], &dev);
        let before = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
        let y = (x.exp() + 1.0).relu();
        y.realize().unwrap();
        let z = y.sum_all();
        assert_eq!(z.to_vec().len(), 1);
        let files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(files.len(), before + 2, "{}: {files:?}", dev.name());
        let texts: Vec<String> = files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect();
        assert!(texts.iter().any(|t| t.contains("kernel 0: exp+add+relu [3]")), "{texts:?}");
        assert!(texts.iter().any(|t| t.contains("kernel 0: sum [3]")), "{texts:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
