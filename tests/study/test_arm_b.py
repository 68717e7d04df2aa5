"""Arm B (LAMB against AdamW on a masked-LM BERT) end to end on its tiny preset, on the
embedded corpus; its workload's parts are tested in test_bert_mlm.py, the protocol on a fake
workload in test_arms.py."""


def test_arm_b_runs_end_to_end_on_its_tiny_preset(tmp_path):
    from keras_largebatch.study import ledger
    from keras_largebatch.study.arms import runner
    from keras_largebatch.study.arms.config import preset

    page = tmp_path / "page.md"
    page.write_text("<!-- study-arm bert_lamb: begin -->\n<!-- study-arm bert_lamb: end -->\n")
    # Without refinement trials: the protocol's refinement runs in arm A's end-to-end test and
    # on the fake workload; here the workload's wiring is what is tested.
    config = preset("bert_lamb", "tiny", data_dir=str(tmp_path / "cache"), refinement_trials=0)
    outcome = runner.run_arm(config, str(tmp_path / "arm"), page=str(page))
    rows = ledger.read_rows(str(tmp_path / "arm"))
    # Pilot: 2 batch sizes x (1 search + 1 seed); main: 1 batch size x 2 optimizers x
    # (1 search + 1 seed).
    assert outcome.trials_trained == len(rows) == 8
    for row in rows:
        assert row["curve"], row["key"]
        # The curve's loss is the masked-LM loss the target is read from.
        if row["stop"] == "target":
            assert row["curve"][-1][2] <= config.target
        if row["phase"].endswith("seed") and row["stop"] != "diverged":
            assert row["test_loss"] > 0 and 0 <= row["test_accuracy"] <= 1
    assert "LAMB against AdamW on a BERT" in page.read_text()
    assert runner.run_arm(config, str(tmp_path / "arm")).trials_trained == 0
