# Included by ctest (tests/costs/CMakeLists.txt), after every other folder's
# entries are known: the COST of each long entry, in seconds of the ASan
# build (ci-asan) on the 2-core CI machine, which ctest uses to start the
# longest entries first. Without it a clean clone (no
# Testing/Temporary/CTestCostData.txt yet) runs the entries in the order
# they were added, and `ctest -j2` could end with one long entry on one
# core. A measured run's cost data takes over from these numbers.
# tests/costs/check_costs.py (ctest entry tests_ctest_costs) fails on a
# name here that no longer names an entry. Refresh from a full ASan run:
#   sort -k3 -rn build-ci-asan/Testing/Temporary/CTestCostData.txt | head -30
# mixed_vs_autocast_cpu is the gcc build's longest (64 s), less under ASan.
set(_ty_costs
  apps_trainyard_deterministic_ServeTest 250
  apps_trainyard_eval_ExampleTest 180
  apps_trainyard_serve_ShutdownTest 115
  apps_trainyard_options_TrainOptionsTest 87
  apps_trainyard_deterministic_EvalServeTest 86
  apps_trainyard_deterministic_GenerateTest 74
  mixed_vs_autocast_cpu 64
  apps_trainyard_options_CompareOptionsTest 54
  apps_trainyard_pipeline_DeviceP2PTest 53
  apps_trainyard_memory_LeverTest 48
  apps_trainyard_pipeline_TensorPipelineTest 46
  apps_trainyard_safety_RunFolderTest 45
  apps_trainyard_pipeline_ZeroPipelineTest 44
  grad_fd_test 43
  apps_trainyard_pipeline_FromSeedTest 38
  apps_trainyard_rank_agreement_AgreeTest 31
  apps_trainyard_pipeline_PipelineTest 29
  apps_trainyard_pipeline_RefuseTest 28
  apps_trainyard_safety_ResumeStateTest 28
  apps_trainyard_serve_LimitsTest 27
  apps_trainyard_serve_OptionsTest 26
  loss_chunk_test 26
  apps_trainyard_safety_SignalTest 25
  multihost_EnvFaultTest 24
  apps_trainyard_eval_TrainEvalTest 24
  apps_trainyard_train_ResumeTest 23
  cuda_emu_fusion_loss_test 21
  multihost_MpirunFaultTest 21
  multihost_MpirunMatchTest 21
  apps_trainyard_serve_LoadTest 19
  apps_trainyard_pipeline_DataParallelPipelineTest 18
  apps_trainyard_eval_EvalTest 18
  cuda_emu_fusion_test 16
  multihost_EnvMatchTest 15)
while(_ty_costs)
  list(POP_FRONT _ty_costs _ty_name _ty_cost)
  set_tests_properties("${_ty_name}" PROPERTIES COST "${_ty_cost}")
endwhile()
