"""nw: project-scoped render jobs for AI media apps.

``nw.Project`` is a folder; ``nw.jobs`` is the job facade that lives in it.
"""

from nw.project import Project, ProjectError

__version__ = "0.2.0"

__all__ = ["Project", "ProjectError", "__version__"]
