package cli

import "github.com/spf13/cobra"

// addCommands adds every command.
func addCommands(a *App, root *cobra.Command) {
	root.AddCommand(
		newVersionCmd(a),
		newConfigCmd(a),
		newModelsCmd(a),
		newDoctorCmd(a),
		newSandboxCmd(a, newSandboxDiffCmd(a), newSandboxProfileCmd(a), newSandboxGCCmd(a), newSandboxServeCmd(a), newSandboxServerCmd(a)),
		newTDDCmd(a),
		newKernelCmd(a), newStatusCmd(a), newServeCmd(a),
		newPolicyCmd(a),
		newAuditCmd(a),
		newChangesCmd(a),
		newSessionCmd(a),
		newImageCmd(a),
		newApproveCmd(a), newApprovalsCmd(a),
		newCronCmd(a),
		newMatrixCmd(a),
		newAskCmd(a),
		newDemoCmd(a),
		newHookCmd(a),
		newMemoryCmd(a),
		newBackupCmd(a),
		newWebCmd(a),
		newSecretCmd(a),
		newSchedCmd(a),
		newPluginCmd(a),
		newMCPCmd(a),
		newSkillCmd(a),
	)
	addSkillInstallCmds(a, root)
	setupTaskCmd(a, root)
	addSkillBuildCmd(a, root)
}
